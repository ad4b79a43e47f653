"""The stand-in k3s' kubelet credentials and Node API (tests/boot/standin.py, the section on
them), run on 127.0.0.1 without booting: the rules the autoscaled boot relies on, each shown
to hold on its own (k3s' node password, the node authorizer and NodeRestriction, the API's
refusal of anonymous requests, the merge patch)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from raya.nodes.identity import ClusterSecrets, agent_token, generate_example_secrets
from tests.boot.standin import MERGE_PATCH, NodeApi, kube_request, sign_client_certificate
from tests.nodes.k3s_join import JoinRefused, join, k3s_like_server, serving_certificate

NODE = "raya-burst-5f1d2e3c4b5a6978"
OTHER = "raya-burst-00aa"


@pytest.fixture(scope="module")
def secrets() -> ClusterSecrets:
    return generate_example_secrets(["control-plane"])


@pytest.fixture
def server(secrets: ClusterSecrets, tmp_path: Path) -> Iterator[str]:
    api = NodeApi(secrets.client_ca)
    serving = serving_certificate(secrets.server_ca, tmp_path, "127.0.0.1")
    with k3s_like_server(
        serving, secrets.server_ca.cert_pem.encode(), "server-secret", secrets.agent_secret,
        agent_handlers={"/v1-k3s/client-kubelet.crt": api.kubelet_certificate},
        api=api.respond, client_ca=secrets.client_ca.cert_pem,
    ) as url:  # fmt: skip
        yield url


def _kubelet_certificate(url: str, secrets: ClusterSecrets, name: str, password: str) -> str:
    """What a k3s agent gets for its kubelet: the certificate (then the CA's) in PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "anything")]))
        .sign(key, hashes.SHA256())
    )
    token = agent_token(secrets.server_ca.cert_pem, secrets.agent_secret)
    headers = {"K3s-Node-Name": name, "K3s-Node-Password": password}
    der = request.public_bytes(serialization.Encoding.DER)
    return join(url, token, "/v1-k3s/client-kubelet.crt", der, headers).decode()


def _kubeconfig(
    url: str, secrets: ClusterSecrets, user: str, groups: list[str], folder: Path
) -> Path:
    """A kubeconfig of files, as k3s writes the kubelet's, for a certificate of the client CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = sign_client_certificate(secrets.client_ca, key.public_key(), user, groups)
    files = {"ca.crt": secrets.server_ca.cert_pem, "client.crt": cert, "client.key":
             key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption()).decode()}  # fmt: skip
    for name, text in files.items():
        (folder / f"{user}-{name}").write_text(text)
    document = {
        "clusters": [{"cluster": {"server": url,
                                  "certificate-authority": str(folder / f"{user}-ca.crt")}}],
        "users": [{"user": {"client-certificate": str(folder / f"{user}-client.crt"),
                            "client-key": str(folder / f"{user}-client.key")}}],
    }  # fmt: skip
    path = folder / f"{user}.kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}


def test_the_kubelets_certificate_names_the_node_and_a_name_keeps_its_first_password(
    server: str, secrets: ClusterSecrets
) -> None:
    bundle = _kubelet_certificate(server, secrets, NODE, "first")
    cert = x509.load_pem_x509_certificate(bundle.encode())
    subject = {a.oid: a.value for a in cert.subject}
    assert subject == {NameOID.COMMON_NAME: f"system:node:{NODE}",
                       NameOID.ORGANIZATION_NAME: "system:nodes"}  # fmt: skip
    assert bundle.endswith(secrets.client_ca.cert_pem)
    ca = x509.load_pem_x509_certificate(secrets.client_ca.cert_pem.encode())
    cert.verify_directly_issued_by(ca)
    _kubelet_certificate(server, secrets, NODE, "first")  # the same password: again
    with pytest.raises(JoinRefused, match="Node password rejected, duplicate hostname"):
        _kubelet_certificate(server, secrets, NODE, "second")
    _kubelet_certificate(server, secrets, OTHER, "second")  # another name: its own


def test_a_kubelet_creates_and_patches_its_own_node_and_no_other(
    server: str, secrets: ClusterSecrets, tmp_path: Path
) -> None:
    kubelet = _kubeconfig(server, secrets, f"system:node:{NODE}", ["system:nodes"], tmp_path)
    admin = _kubeconfig(server, secrets, "raya-admin", ["system:masters"], tmp_path)
    assert kube_request(kubelet, "POST", "/api/v1/nodes", _node(NODE))[0] == 201
    code, refusal = kube_request(kubelet, "POST", "/api/v1/nodes", _node(OTHER))
    assert (code, refusal["message"]) == (403, f'nodes "{OTHER}" is forbidden: node "{NODE}" '
                                         f'is not allowed to modify node "{OTHER}"')  # fmt: skip
    assert kube_request(admin, "POST", "/api/v1/nodes", _node(OTHER))[0] == 201
    patch = {"metadata": {"annotations": {"raya.dev/key": "value"}}}
    code, refusal = kube_request(kubelet, "PATCH", f"/api/v1/nodes/{OTHER}", patch, MERGE_PATCH)
    assert (code, refusal["reason"]) == (403, "Forbidden")
    code, node = kube_request(kubelet, "PATCH", f"/api/v1/nodes/{NODE}", patch, MERGE_PATCH)
    assert (code, node["metadata"]["annotations"]) == (200, {"raya.dev/key": "value"})
    # A kubelet reads any Node; a null removes an annotation (RFC 7386).
    assert kube_request(kubelet, "GET", f"/api/v1/nodes/{OTHER}")[0] == 200
    remove = {"metadata": {"annotations": {"raya.dev/key": None}}}
    code, node = kube_request(kubelet, "PATCH", f"/api/v1/nodes/{NODE}", remove, MERGE_PATCH)
    assert (code, node["metadata"]["annotations"]) == (200, {})
    # Only a merge patch here; anyone else is refused by RBAC.
    code, _ = kube_request(kubelet, "PATCH", f"/api/v1/nodes/{NODE}", [],
                           "application/json-patch+json")  # fmt: skip
    assert code == 415
    stranger = _kubeconfig(server, secrets, "someone", ["developers"], tmp_path)
    assert kube_request(stranger, "GET", f"/api/v1/nodes/{NODE}")[0] == 403


def test_the_api_refuses_a_request_without_a_client_certificate(
    server: str, secrets: ClusterSecrets
) -> None:
    context = ssl.create_default_context(cadata=secrets.server_ca.cert_pem)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{server}/api/v1/nodes/{NODE}", context=context, timeout=10)
    assert refused.value.code == 401
    assert json.loads(refused.value.read())["reason"] == "Unauthorized"
