"""Service account key files held to Google's own library, not to the code that makes them."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable
from typing import Any

import google.auth
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from google.auth import exceptions as google_errors
from google.oauth2 import service_account

from raya.errors import RenderError
from raya.nodes.identity import check_service_account_key
from tests.cloud.program import mocks

# Deprecated for credentials from untrusted sources; here it is the oracle for the format.
pytestmark = pytest.mark.filterwarnings("ignore:The load_credentials_from_dict:DeprecationWarning")

EMAIL = "external-dns@raya-test.iam.gserviceaccount.com"


def mock_key() -> dict[str, Any]:
    """A key file exactly as the Pulumi mocks hand it to the program (GCP's base64 JSON)."""
    key = mocks._service_account_key(f"projects/raya-test/serviceAccounts/{EMAIL}")
    document: dict[str, Any] = json.loads(base64.b64decode(key))
    return document


def google_accepts(document: dict[str, Any]) -> bool:
    """What Google's loader (the path GOOGLE_APPLICATION_CREDENTIALS takes) makes of it."""
    try:
        google.auth.load_credentials_from_dict(document)
    except (google_errors.GoogleAuthError, ValueError, TypeError):
        return False
    return True


def raya_accepts(document: dict[str, Any]) -> bool:
    try:
        check_service_account_key("external_dns_key", json.dumps(document))
    except RenderError:
        return False
    return True


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, form: serialization.PrivateFormat,
        passphrase: bytes | None = None) -> str:
    encryption = (serialization.BestAvailableEncryption(passphrase) if passphrase
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, form, encryption).decode()


def test_the_mocks_keys_load_in_googles_library() -> None:
    document = mock_key()
    credentials = service_account.Credentials.from_service_account_info(document)
    assert credentials.service_account_email == EMAIL
    assert credentials.project_id == mocks.PROJECT
    assert credentials.signer.sign(b"payload")  # an RS256 signature: the key is usable
    assert raya_accepts(document)


def drop(name: str, document: dict[str, Any]) -> None:
    del document[name]


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def der(tag: int, body: bytes) -> bytes:
    """One DER element (X.690): tag, definite length, body."""
    size = len(body).to_bytes((len(body).bit_length() + 7) // 8 or 1, "big")
    return bytes([tag]) + (size if len(body) < 128 else bytes([0x80 | len(size)]) + size) + body


def tampered(**numbers: int) -> str:
    """RSA_KEY as a PKCS#1 PEM (RFC 8017, A.1.2) with some of its numbers replaced: a damaged
    key, written by hand since cryptography refuses to build one."""
    real = RSA_KEY.private_numbers()
    values = {"n": real.public_numbers.n, "e": real.public_numbers.e, "d": real.d, "p": real.p,
              "q": real.q, "dmp1": real.dmp1, "dmq1": real.dmq1, "iqmp": real.iqmp} | numbers
    body = der(0x02, b"\0") + b"".join(
        der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big")) for value in values.values()
    )
    encoded = base64.encodebytes(der(0x30, body)).decode()
    return f"-----BEGIN RSA PRIVATE KEY-----\n{encoded}-----END RSA PRIVATE KEY-----\n"


def damage(name: str, document: dict[str, Any]) -> None:
    """The key replaced by RSA_KEY with its number `name` off by two."""
    real = RSA_KEY.private_numbers()
    value = real.public_numbers.n if name == "n" else getattr(real, name)
    document["private_key"] = tampered(**{name: value + 2})


# Each change to a mock key file, and the field it touches. Google's verdict is computed, not
# written down: raya must accept exactly what Google's loader accepts.
CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    **{f"without {name}": functools.partial(drop, name) for name in (
        "type", "project_id", "private_key_id", "private_key", "client_email", "client_id",
        "auth_uri", "token_uri", "auth_provider_x509_cert_url", "client_x509_cert_url",
        "universe_domain")},
    "other type": lambda d: d.update(type="authorized_user"),
    "PKCS#1 key": lambda d: d.update(
        private_key=pem(RSA_KEY, serialization.PrivateFormat.TraditionalOpenSSL)),
    "truncated key": lambda d: d.update(private_key=d["private_key"][:200]),
    "not a key": lambda d: d.update(private_key="-----BEGIN PRIVATE KEY-----\nnope\n"),
    "encrypted key": lambda d: d.update(
        private_key=pem(RSA_KEY, serialization.PrivateFormat.PKCS8, b"passphrase")),
    # Each of the numbers a key is checked by, damaged (Google's loader checks them all).
    "key as it is, PKCS#1 by hand": lambda d: d.update(private_key=tampered()),
    **{f"key with another {name}": functools.partial(damage, name) for name in (
        "n", "d", "p", "q", "dmp1", "dmq1", "iqmp")},
}


@pytest.mark.parametrize("change", CHANGES)
def test_raya_accepts_exactly_what_google_accepts(change: str) -> None:
    document = mock_key()
    CHANGES[change](document)
    assert raya_accepts(document) == google_accepts(document)


def test_only_what_google_needs_is_required() -> None:
    document = {key: mock_key()[key] for key in ("type", "client_email", "token_uri",
                                                 "private_key")}
    assert google_accepts(document)
    assert raya_accepts(document)


def test_a_key_google_cannot_sign_with_is_refused() -> None:
    """google-auth loads any PEM key but signs RS256 only: an EC key fails at first use."""
    document = mock_key()
    document["private_key"] = pem(ec.generate_private_key(ec.SECP256R1()),
                                  serialization.PrivateFormat.PKCS8)
    credentials = service_account.Credentials.from_service_account_info(document)
    # google-auth's RSASigner calls key.sign(message, padding, hash), RSA's signature.
    with pytest.raises(TypeError, match=r"ECPrivateKey\.sign\(\) takes 2 positional arguments"):
        credentials.signer.sign(b"payload")
    with pytest.raises(RenderError, match="private_key is not an unencrypted PEM RSA"):
        check_service_account_key("external_dns_key", json.dumps(document))


def test_refusals_name_the_field_and_what_is_accepted() -> None:
    document = mock_key()
    del document["token_uri"]
    with pytest.raises(RenderError, match=r'cert_manager_key is not a GCP service account key .*'
                                          r'"token_uri"'):
        check_service_account_key("cert_manager_key", json.dumps(document))
