"""A stand-in for `raya.render` until it lands: the contract's shape, a minimal Ignition."""

from __future__ import annotations

import json
import sys
import types
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from raya.fleet import Cluster, Node
from raya.github_keys import UserKeys, authorized_keys
from raya.identity import ClusterSecrets, full_token


@dataclass(frozen=True)
class RenderedNode:
    node: Node
    butane: str
    ignition: bytes


def _file(path: str, text: str) -> dict[str, Any]:
    return {
        "path": path,
        "contents": {"source": "data:," + urllib.parse.quote(text)},
        "mode": 0o600,
    }


def render_node(
    cluster: Cluster, node: Node, secrets: ClusterSecrets, users: Sequence[UserKeys]
) -> RenderedNode:
    if node.role == "control-plane":
        files = [
            _file("/etc/rancher/k3s/config.yaml", f"token: {secrets.join_secret}\n"),
            _file("/var/lib/rancher/k3s/server/tls/server-ca.crt", secrets.server_ca.cert_pem),
            _file("/var/lib/rancher/k3s/server/tls/server-ca.key", secrets.server_ca.key_pem),
        ]
    else:
        token = full_token(secrets.server_ca.cert_pem, secrets.join_secret)
        files = [
            _file(
                "/etc/rancher/k3s/config.yaml",
                f"server: https://{cluster.control_plane.private_ip}:6443\ntoken: {token}\n",
            )
        ]
    config = {
        "ignition": {"version": "3.4.0"},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": list(authorized_keys(users))}]},
        "storage": {"files": files},
    }
    return RenderedNode(node, "", json.dumps(config, sort_keys=True).encode())


def install() -> None:
    module = types.ModuleType("raya.render")
    module.RenderedNode = RenderedNode  # type: ignore[attr-defined]
    module.render_node = render_node  # type: ignore[attr-defined]
    sys.modules["raya.render"] = module
