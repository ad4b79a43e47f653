"""A k3s-style join over real TLS on 127.0.0.1, with the rendered CA and an agent's token
(the two ends, and the k3s behaviour they model, are in k3s_join.py)."""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from raya.nodes.identity import CertificateAuthority, generate_example_secrets
from raya.nodes.render import RenderedNode
from tests.nodes.k3s_join import (
    AGENT_PATHS,
    SERVER_PATHS,
    JoinRefused,
    join,
    k3s_like_server,
    serving_certificate,
)
from tests.nodes.tools import ignition_files

TLS = "/var/lib/raya/k3s-server-seed/tls"  # copied onto the volume at boot
CONFIG = "/etc/rancher/k3s/config.yaml"


@dataclass(frozen=True)
class ControlPlane:
    """What the rendered control plane holds: its CA and the two secrets k3s is given."""

    ca: CertificateAuthority
    server_secret: str  # `token`
    agent_secret: str  # `agent-token`

    def server(
        self, folder: Path, ca: CertificateAuthority | None = None
    ) -> contextlib.AbstractContextManager[str]:
        """The fake k3s server, serving the rendered CA, with a certificate signed by `ca`
        (by default the rendered one)."""
        serving = serving_certificate(ca or self.ca, folder)
        return k3s_like_server(
            serving, self.ca.cert_pem.encode(), self.server_secret, self.agent_secret
        )


def _control_plane(rendered: dict[str, RenderedNode]) -> ControlPlane:
    files = ignition_files(rendered["control-plane"].ignition)
    config = yaml.safe_load(files[CONFIG])
    ca = CertificateAuthority(
        cert_pem=files[f"{TLS}/server-ca.crt"].decode(),
        key_pem=files[f"{TLS}/server-ca.key"].decode(),
    )
    return ControlPlane(ca, config["token"], config["agent-token"])


def _agent_token(rendered: dict[str, RenderedNode], name: str) -> str:
    config = yaml.safe_load(ignition_files(rendered[name].ignition)[CONFIG])
    assert config["server"] == "https://10.0.1.10:6443"  # the control plane, privately
    return str(config["token"])


def test_an_agent_joins_the_control_plane_it_was_rendered_for(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    with _control_plane(rendered).server(tmp_path) as url:
        for name in ("agent-0", "agent-1", "agent-2"):
            token = _agent_token(rendered, name)
            for path in AGENT_PATHS:
                assert join(url, token, path) == f"welcome to {path}".encode()


def test_an_agent_token_reaches_no_server_only_endpoint(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    control_plane = _control_plane(rendered)
    ca_hash = hashlib.sha256(control_plane.ca.cert_pem.encode()).hexdigest()
    # What the spec's `::server:` form would have handed every agent: all of it.
    server_token = f"K10{ca_hash}::server:{control_plane.server_secret}"
    agent_token = _agent_token(rendered, "agent-0")
    with control_plane.server(tmp_path) as url:
        for path in SERVER_PATHS:
            assert join(url, server_token, path) == f"welcome to {path}".encode()
            with pytest.raises(JoinRefused, match="Forbidden"):
                join(url, agent_token, path)
        # Nor does the agent secret pass for the server user's.
        as_server = agent_token.replace("::node:", "::server:")
        with pytest.raises(JoinRefused, match="Unauthorized"):
            join(url, as_server, "/v1-k3s/server-bootstrap")


def test_a_server_with_another_ca_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    control_plane = _control_plane(rendered)
    other = generate_example_secrets(()).server_ca
    serving = serving_certificate(other, tmp_path)
    # Serving its own CA: the hash in the token does not match.
    with (
        k3s_like_server(
            serving,
            other.cert_pem.encode(),
            control_plane.server_secret,
            control_plane.agent_secret,
        ) as url,
        pytest.raises(JoinRefused, match="hash does not match"),
    ):
        join(url, _agent_token(rendered, "agent-0"))


def test_a_server_replaying_the_ca_without_its_key_is_refused(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    other = generate_example_secrets(()).server_ca
    # The right CA bytes at /cacerts, but a certificate it did not sign: TLS refuses it.
    with (
        _control_plane(rendered).server(tmp_path, ca=other) as url,
        pytest.raises(JoinRefused, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        join(url, _agent_token(rendered, "agent-0"))


def test_the_server_refuses_a_wrong_secret(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    token = _agent_token(rendered, "agent-0")
    forged = token.rsplit(":", 1)[0] + ":" + "f" * 64
    with (
        _control_plane(rendered).server(tmp_path) as url,
        pytest.raises(JoinRefused, match="Unauthorized"),
    ):
        join(url, forged)
