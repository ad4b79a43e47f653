"""A k3s-style join over real TLS on 127.0.0.1, with the rendered CA and an agent's token
(the two ends are in k3s_join.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from raya.identity import CertificateAuthority, generate_example_secrets
from raya.render import RenderedNode
from tests.nodes.k3s_join import JoinRefused, join, k3s_like_server, serving_certificate
from tests.nodes.tools import ignition_files

TLS = "/var/lib/rancher/k3s/server/tls"
CONFIG = "/etc/rancher/k3s/config.yaml"


def _rendered_identity(rendered: dict[str, RenderedNode]) -> tuple[CertificateAuthority, str]:
    files = ignition_files(rendered["control-plane"].ignition)
    ca = CertificateAuthority(
        cert_pem=files[f"{TLS}/server-ca.crt"].decode(),
        key_pem=files[f"{TLS}/server-ca.key"].decode(),
    )
    return ca, yaml.safe_load(files[CONFIG])["token"]


def _agent_token(rendered: dict[str, RenderedNode], name: str) -> str:
    config = yaml.safe_load(ignition_files(rendered[name].ignition)[CONFIG])
    assert config["server"] == "https://10.0.1.10:6443"  # the control plane, privately
    return str(config["token"])


def test_an_agent_joins_the_control_plane_it_was_rendered_for(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    ca, secret = _rendered_identity(rendered)
    serving = serving_certificate(ca, tmp_path)
    with k3s_like_server(serving, ca.cert_pem.encode(), secret) as url:
        for name in ("agent-0", "agent-1", "agent-2"):
            assert join(url, _agent_token(rendered, name)) == b"welcome"


def test_a_server_with_another_ca_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    _, secret = _rendered_identity(rendered)
    other = generate_example_secrets().server_ca
    token = _agent_token(rendered, "agent-0")
    serving = serving_certificate(other, tmp_path)
    # Serving its own CA: the hash in the token does not match.
    with (
        k3s_like_server(serving, other.cert_pem.encode(), secret) as url,
        pytest.raises(JoinRefused, match="hash does not match"),
    ):
        join(url, token)


def test_a_server_replaying_the_ca_without_its_key_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    ca, secret = _rendered_identity(rendered)
    other = generate_example_secrets().server_ca
    serving = serving_certificate(other, tmp_path)
    # The right CA bytes at /cacerts, but a certificate it did not sign: TLS refuses it.
    with (
        k3s_like_server(serving, ca.cert_pem.encode(), secret) as url,
        pytest.raises(JoinRefused, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        join(url, _agent_token(rendered, "agent-0"))


def test_the_server_refuses_a_wrong_secret(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    ca, secret = _rendered_identity(rendered)
    serving = serving_certificate(ca, tmp_path)
    token = _agent_token(rendered, "agent-0")
    forged = token.rsplit(":", 1)[0] + ":" + "f" * 64
    with (
        k3s_like_server(serving, ca.cert_pem.encode(), secret) as url,
        pytest.raises(JoinRefused, match="Unauthorized"),
    ):
        join(url, forged)
