"""Ignition's rules for resources, URLs, headers, hashes and proxies, as Butane applies them.

Sources: Ignition's config/v3_x/types/resource.go (Resource.Validate,
validateRequiredSource), url.go (validateURL: Go's url.Parse, s3 versionId, arn in 3.4+,
data URLs by github.com/vincent-petithory/dataurl), headers.go, verification.go, proxy.go,
ignition.go and tls.go; the vectors cls-url-parse, cls-arn-source, cls-hash-not-hex,
cls-header-empty-value, cls-verification-no-source, cls-proxy-http-for-https hold the real
Butane's answers.
"""

from __future__ import annotations

import pytest

from raya.butane import ButaneDiagnostics, transpile
from raya.butane.urls import data_url_error, parse, validate


def paths(body: str, version: str = "1.5.0") -> list[str]:
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile(f"variant: fcos\nversion: {version}\n{body}")
    return [path for path, _, _, _ in caught.value.diagnostics]


def file_source(source: str) -> str:
    return f"storage:\n  files:\n    - path: /f\n      contents:\n        source: '{source}'\n"


# url.go validateURL: what Go's url.Parse refuses is "unable to parse url".
@pytest.mark.parametrize("source", ["https://h/%G0", "http://[fd00::1/x", "http://h:port/",
                                    "https://a b/", "http://h/\x7f", ":nothing"])
def test_what_go_cannot_parse_is_refused(source: str) -> None:
    assert validate(source, 6) == "unable to parse url"


@pytest.mark.parametrize("source", ["https://[fd00::1]:8443/x?y#z", "http://u:p%20w@h/%20",
                                    "s3://b/k?versionId=1", "gs://b/o", "tftp://h/f",
                                    "data:,a%20b", "data:text/plain;charset=utf-8;base64,YQ=="])
def test_what_ignition_accepts(source: str) -> None:
    assert validate(source, 4) is None


def test_s3_version_ids_must_not_be_empty() -> None:
    assert validate("s3://b/k?versionId=", 4) == "invalid S3 object VersionId"
    assert validate("s3://b/k?versionId", 4) == "invalid S3 object VersionId"


# ARN sources came with Ignition 3.4 (fcos 1.5); 3.3 knows no such scheme.
def test_arn_sources_from_fcos_1_5() -> None:
    arn = "arn:aws:s3:::bucket/key"
    assert validate(arn, 5) is None and validate(arn, 4) is not None
    assert validate("arn:aws:iam:::bucket/key", 5) is not None  # not s3
    assert validate("arn:aws:s3:::bucket", 5) is not None  # no object
    assert validate("arn:aws:s3:r:1:accesspoint/x", 5) is not None  # no object either


# dataurl's lexer: only URL characters in the data, complete %-escapes, base64 alphabet.
@pytest.mark.parametrize(("url", "problem"), [
    ("data:,a b", "invalid data character"), ("data:,50%", "rfc2396"),
    ("data:;base64,a b=", "invalid data character"), ("data:text,x", "missing media type"),
    ("data:x", "missing comma")])
def test_data_urls_are_lexed_like_the_go_library(url: str, problem: str) -> None:
    assert (data_url_error(url) or "").startswith(problem)


def test_go_url_parse_keeps_opaque_parts_and_lowercases_schemes() -> None:
    url = parse("ARN:aws:s3:::b/k?versionId=2")
    assert (url.scheme, url.opaque, url.query) == ("arn", "aws:s3:::b/k", "versionId=2")


# Verification.Validate checks the function and the length only: non-hex digits pass.
def test_hash_digits_are_not_checked_for_hex() -> None:
    body = file_source("https://h/f") + "        verification:\n          hash: sha256-" + (
        "z" * 64) + "\n"
    assert '"hash":"sha256-zzzz' in transpile(f"variant: fcos\nversion: 1.4.0\n{body}")


# Resource.validateVerification: a hash needs a source to check.
def test_verification_needs_a_source() -> None:
    body = ("storage:\n  files:\n    - path: /f\n      contents:\n        verification:\n"
            "          hash: sha256-" + "0" * 64 + "\n")
    assert paths(body) == ["$.storage.files.0.contents.verification.hash"]


# ignition.go and tls.go: merged configs and CAs need a source; a bad one is reported at
# the item as well as at its source.
def test_merged_configs_and_cas_require_a_source() -> None:
    assert paths("ignition:\n  security:\n    tls:\n      certificate_authorities:\n"
                 "        - compression: gzip\n") == [
        "$.ignition.security.tls.certificate_authorities.0"]
    assert paths("ignition:\n  config:\n    merge:\n      - source: https://h/%G0\n") == [
        "$.ignition.config.merge.0", "$.ignition.config.merge.0.source"]


# headers.go: an empty value is refused; names compare case-insensitively.
def test_http_header_rules() -> None:
    head = "ignition:\n  config:\n    merge:\n      - source: https://h/c\n        http_headers:\n"
    assert paths(head + "          - name: A\n            value: ''\n") == [
        "$.ignition.config.merge.0.http_headers.0.value"]
    assert paths(head + "          - name: X-A\n            value: '1'\n"
                 "          - name: x-a\n            value: '2'\n") == [
        "$.ignition.config.merge.0.http_headers.1"]


# proxy.go: http(s) only, and a plain-http proxy for HTTPS resources is a warning.
def test_proxies() -> None:
    assert paths("ignition:\n  proxy:\n    https_proxy: http://p:3128\n") == [
        "$.ignition.proxy.https_proxy"]
    assert paths("ignition:\n  proxy:\n    http_proxy: 'http://[::1'\n") == [
        "$.ignition.proxy.http_proxy"]
    assert "httpProxy" in transpile("variant: fcos\nversion: 1.5.0\nignition:\n  proxy:\n"
                                    "    http_proxy: http://p:3128\n")


# Butane's base/v0_x/validate.go: an inline merge/replace config is decoded and validated
# by Ignition (ValidateIgnitionConfig), in every fcos version raya reads.
@pytest.mark.parametrize(("version", "ignition"), [("1.4.0", "3.3.0"), ("1.5.0", "3.4.0"),
                                                   ("1.6.0", "3.5.0")])
def test_inline_merged_configs_are_validated(version: str, ignition: str) -> None:
    inline = ('{"ignition": {"version": "' + ignition + '"}, '
              '"systemd": {"units": [{"name": "bad"}]}}')
    body = f"ignition:\n  config:\n    merge:\n      - inline: '{inline}'\n"
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile(f"variant: fcos\nversion: {version}\n{body}")
    # Butane cannot place the embedded config's findings in the YAML: line 1, column 1.
    assert [d[:3] for d in caught.value.diagnostics] == [("$.systemd.units.0.name", 1, 1)]


def test_inline_configs_that_are_not_ignition_json_are_refused() -> None:
    for inline in ("variant: fcos", '{"systemd": {"units": [{"name": "a.service", '
                   '"enabled": "yes"}]}}', "[]"):
        body = f"ignition:\n  config:\n    replace:\n      inline: '{inline}'\n"
        assert paths(body) == ["$.ignition.config.replace.inline"]


def test_inline_configs_of_another_version_are_not_validated_but_warned_about() -> None:
    body = ("ignition:\n  config:\n    merge:\n      - inline: '{\"ignition\": {\"version\": "
            "\"3.2.0\"}, \"systemd\": {\"units\": [{\"name\": \"bad\"}]}}'\n")
    assert paths(body) == ["$.ignition.config.merge.0.version"]
    assert transpile(f"variant: fcos\nversion: 1.5.0\n{body}", strict=False)


def test_embedded_findings_land_on_the_butane_node_of_the_same_path() -> None:
    inline = '{"ignition": {"version": "3.3.0"}, "storage": {"files": [{"path": "rel"}]}}'
    text = (f"variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /ok\n"
            f"ignition:\n  config:\n    merge:\n      - inline: '{inline}'\n")
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile(text)
    assert [d[:3] for d in caught.value.diagnostics] == [("$.storage.files.0.path", 5, 13)]


def test_an_inline_config_without_a_version_is_invalid_ignition() -> None:
    # Ignition.Validate: no parseable version is an error at the embedded $.ignition.version.
    for inline in ('{"ignition": null}', '{}'):
        body = f"ignition:\n  config:\n    replace:\n      inline: '{inline}'\n"
        assert paths(body) == ["$.ignition.version"]
