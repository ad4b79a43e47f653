"""Node configs: the model and the cluster's identity in, each node's Ignition bytes out.

One code path for the offline `raya render` and the deployment: a node's template context
is built here (nowhere else), laid out by the Jinja Butane templates in `templates/` and
transpiled in strict mode. Pure and deterministic: the same inputs give the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from raya.addons import GCP_SECRETS
from raya.addons import manifests as addon_manifests
from raya.butane import transpile
from raya.config import PRIVATE_ROUTE
from raya.errors import ButaneError, RenderError
from raya.fleet import Cluster, Node, node_password
from raya.github_keys import GITHUB_URL, UserKeys, authorized_keys
from raya.identity import (
    ClusterSecrets,
    check_certificate_authority,
    check_join_secret,
    check_service_account_key,
    full_token,
    load_ca_certificate,
)
from raya.pins import ChartPins

# Hetzner's `user_data` limit.
IGNITION_LIMIT = 32 * 1024
# Keys whose text exceeds this are not carried inline but fetched at first boot, pinned by
# hash: 150 RSA-4096 keys are ~109 KB of text and ~78 KB gzipped (their moduli are random),
# so no encoding fits them in 32 KiB. See docs/nodes.md for the measurement.
INLINE_KEYS_BUDGET = 8 * 1024
TEMPLATES = Path(__file__).parent / "templates"

PRIVATE_INTERFACE = "enp7s0"
PRIVATE_MTU = 1450  # Hetzner's private networks
METADATA_PUBLIC_IPV4 = "http://169.254.169.254/hetzner/v1/metadata/public-ipv4"
K3S_BINARY = "/usr/local/bin/k3s"  # /usr/local is /var/usrlocal on FCOS
K3S_BINARY_REAL = "/var/usrlocal/bin/k3s"
K3S_PORT = 6443
SSH_KEY_DIR = "/home/core/.ssh/authorized_keys.d"  # read by FCOS' ssh-key-dir


@dataclass(frozen=True)
class RenderedNode:
    node: Node
    butane: str  # the rendered Butane YAML
    ignition: bytes  # the Ignition JSON, compact, deterministic


def render_node(
    cluster: Cluster,
    node: Node,
    secrets: ClusterSecrets,
    users: Sequence[UserKeys],
    *,
    charts: ChartPins,
    keys_base_url: str = GITHUB_URL,
) -> RenderedNode:
    """One node's config. An agent's depends only on the cluster config, that agent, the join
    secret, the server CA certificate and the users' keys; the control plane's also on the
    chart pins of its add-ons."""
    if node not in cluster.nodes:
        raise RenderError(f"{node.name}: not a node of cluster {cluster.config.cluster_name}")
    _check_inputs(cluster, (node,), secrets, users)
    return _render(cluster, node, secrets, _ssh_keys(users, keys_base_url), charts)


def render_cluster(
    cluster: Cluster,
    secrets: ClusterSecrets,
    users: Sequence[UserKeys],
    *,
    charts: ChartPins,
    keys_base_url: str = GITHUB_URL,
) -> tuple[RenderedNode, ...]:
    """Every node's config, control plane first, then the agents in fleet order."""
    _check_inputs(cluster, cluster.nodes, secrets, users)
    keys = _ssh_keys(users, keys_base_url)
    return tuple(_render(cluster, node, secrets, keys, charts) for node in cluster.nodes)


def _check_inputs(
    cluster: Cluster, nodes: Sequence[Node], secrets: ClusterSecrets, users: Sequence[UserKeys]
) -> None:
    configured = {handle.lower() for handle in cluster.config.authorized_users}
    given = {user.handle.lower() for user in users}
    if given != configured:
        missing = sorted(configured - given) or ["none"]
        extra = sorted(given - configured) or ["none"]
        raise RenderError(
            f"keys: the users' keys must be those of raya:authorizedUsers exactly; "
            f"missing: {', '.join(missing)}; not configured: {', '.join(extra)}"
        )
    check_join_secret(secrets.join_secret)
    if any(node.role == "control-plane" for node in nodes):
        check_certificate_authority("server_ca", secrets.server_ca)
        check_certificate_authority("client_ca", secrets.client_ca)
        for field in GCP_SECRETS:
            check_service_account_key(field, getattr(secrets, field))
    else:  # an agent never sees the control plane's private keys
        load_ca_certificate("server_ca", secrets.server_ca.cert_pem)


def keys_inline(users: Sequence[UserKeys]) -> bool:
    """Whether the users' keys are carried inline (else fetched at first boot, pinned)."""
    return sum(len(key.encode()) + 1 for key in authorized_keys(users)) <= INLINE_KEYS_BUDGET


def _ssh_keys(users: Sequence[UserKeys], base_url: str) -> dict[str, Any]:
    """Inline keys if their text fits the budget, else one hash-pinned fetch per user."""
    if keys_inline(users):
        return {"inline": list(authorized_keys(users)), "pinned": [], "dir": SSH_KEY_DIR}
    if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", base_url):
        raise RenderError(f"keys_base_url is {base_url!r}; accepted: an http(s) URL")
    pinned = [
        {
            "handle": user.handle,
            "url": f"{base_url.rstrip('/')}/{user.handle}.keys",
            # sha256, not sha512: 64 bytes less per user is what keeps 50 users' worth of
            # 39-character handles well inside the limit.
            "hash": "sha256-" + hashlib.sha256(user.raw.encode()).hexdigest(),
        }
        for user in sorted(users, key=lambda user: user.handle.lower())
    ]
    return {"inline": [], "pinned": pinned, "dir": SSH_KEY_DIR}


def _context(
    cluster: Cluster,
    node: Node,
    secrets: ClusterSecrets,
    ssh_keys: dict[str, Any],
    charts: ChartPins,
) -> dict[str, Any]:
    config = cluster.config
    common: dict[str, Any] = {
        "node": node,
        "ssh_keys": ssh_keys,
        "network": {
            "interface": PRIVATE_INTERFACE,
            "keyfile": f"/etc/NetworkManager/system-connections/{PRIVATE_INTERFACE}.nmconnection",
            "mtu": PRIVATE_MTU,
            "prefix": config.nodes_subnet.prefixlen,
            "gateway": config.gateway,
            "route": PRIVATE_ROUTE,
        },
        "public_ipv4": {
            "unit": "raya-public-ipv4.service",
            "script": "/usr/local/bin/raya-public-ipv4",
            "url": METADATA_PUBLIC_IPV4,
            "dropin": "/etc/rancher/k3s/config.yaml.d/50-node-external-ip.yaml",
        },
        "k3s_binary": K3S_BINARY,
        "k3s_binary_real": K3S_BINARY_REAL,
        "k3s_config": "/etc/rancher/k3s/config.yaml",
        "k3s_dropin_dir": "/etc/rancher/k3s/config.yaml.d",
    }
    if node.role == "control-plane":
        return {
            **common,
            "k3s": {
                "unit": "k3s.service",
                "description": "k3s server (control plane)",
                "command": "server",
                "restart_sec": "5s",
            },
            "join_secret": secrets.join_secret,
            "tls_san": cluster.dns_name(node).rstrip("."),
            "tls_dir": "/var/lib/rancher/k3s/server/tls",
            "cas": [
                {"name": name, "cert_pem": ca.cert_pem, "key_pem": ca.key_pem}
                for name, ca in (("server-ca", secrets.server_ca), ("client-ca", secrets.client_ca))
            ],
            "manifests_dir": "/var/lib/rancher/k3s/server/manifests",
            "gcp_secrets": [
                {"file": file, "name": name, "key": getattr(secrets, field)}
                for field, (file, name) in GCP_SECRETS.items()
            ],
            "addons": sorted(
                addon_manifests(
                    config, charts, secrets.external_dns_key, secrets.cert_manager_key
                ).items()
            ),
        }
    assert node.index is not None
    return {
        **common,
        "k3s": {
            "unit": "k3s-agent.service",
            "description": "k3s agent",
            "command": "agent",
            "restart_sec": "10s",
        },
        "server_url": f"https://{config.control_plane_ip}:{K3S_PORT}",
        "token": full_token(secrets.server_ca.cert_pem, secrets.join_secret),
        "node_password_file": "/etc/rancher/node/password",
        "node_password": node_password(secrets.join_secret, node.index),
    }


def _render(
    cluster: Cluster,
    node: Node,
    secrets: ClusterSecrets,
    ssh_keys: dict[str, Any],
    charts: ChartPins,
) -> RenderedNode:
    template_name = f"{node.role}.bu.j2"
    context = _context(cluster, node, secrets, ssh_keys, charts)
    try:
        butane = _environment().get_template(template_name).render(context)
    except jinja2.TemplateError as error:
        where = getattr(error, "lineno", None)
        raise RenderError(
            f"{TEMPLATES / template_name}{f':{where}' if where else ''}: {node.name}: {error}"
        ) from None
    try:
        ignition = transpile(butane, strict=True, source=f"{node.name}.bu").encode()
    except ButaneError as error:
        raise RenderError(f"{node.name}: the rendered Butane was rejected: {error}") from None
    if len(ignition) > IGNITION_LIMIT:
        raise RenderError(
            f"{node.name}: Ignition config is {len(ignition)} bytes, over Hetzner's user_data "
            f"limit of {IGNITION_LIMIT}; largest parts: {', '.join(_largest_parts(ignition))}"
        )
    return RenderedNode(node=node, butane=butane, ignition=ignition)


def _largest_parts(ignition: bytes, count: int = 4) -> list[str]:
    """What takes the most room: files grouped by folder (50 pinned SSH key files weigh
    more than any one file), then units and users, as 'what (N bytes)'."""
    config = json.loads(ignition)
    sizes: dict[str, list[int]] = {}
    for kind, entries in (
        ("file", config.get("storage", {}).get("files", [])),
        ("unit", config.get("systemd", {}).get("units", [])),
        ("user", config.get("passwd", {}).get("users", [])),
    ):
        for entry in entries:
            group = f"{entry['path'].rsplit('/', 1)[0]}/*" if kind == "file" else f"{kind}s"
            sizes.setdefault(group, []).append(len(json.dumps(entry, separators=(",", ":"))))
    ranked = sorted(sizes.items(), key=lambda item: (-sum(item[1]), item[0]))[:count]
    return [f"{group} ({len(each)} entries, {sum(each):,} bytes)" for group, each in ranked]


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(q=yaml_quoted, literal=yaml_literal)
    return environment


# Characters a YAML double-quoted scalar must carry escaped: quote, backslash, C0/C1 controls,
# DEL, and what YAML 1.1 readers take for line breaks or a byte order mark.
_YAML_ESCAPES = {
    code: f"\\u{code:04x}"
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0xFEFF)
}
_YAML_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})


# What a literal block cannot carry as is: controls but tab and newline, and characters
# YAML readers take for line breaks or a byte order mark.
_NOT_LITERAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def yaml_quoted(value: object) -> str:
    """`value` as a YAML double-quoted scalar that reads back exactly."""
    return '"' + str(value).translate(_YAML_ESCAPES) + '"'


def yaml_literal(text: str, indent: int) -> str:
    """`text` as a YAML literal block scalar indented by `indent`, reading back exactly.

    Text a literal block cannot carry faithfully (leading blanks on its first line,
    whitespace-only lines, control characters) falls back to a quoted scalar.
    """
    body = text[:-1] if text.endswith("\n") else text
    lines = body.split("\n")
    filled = [line for line in lines if line]
    if (
        not filled
        or filled[0][0] in " \t"  # would read as indentation
        or any(line.isspace() for line in lines)
        or _NOT_LITERAL.search(body)
    ):
        return yaml_quoted(text)
    chomp = "-" if not text.endswith("\n") else "+" if text.endswith("\n\n") else ""
    pad = " " * indent
    return f"|{chomp}\n" + "\n".join(pad + line if line else "" for line in lines)
