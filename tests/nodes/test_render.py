"""Rendering, on the bytes: contents, invariants, determinism, size. No external tools."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from raya import render as render_module
from raya.addons import GCP_SECRETS
from raya.errors import RenderError
from raya.fleet import Cluster, build_cluster, node_password
from raya.github_keys import UserKeys, authorized_keys
from raya.identity import CertificateAuthority, ClusterSecrets, generate_example_secrets
from raya.render import (
    IGNITION_LIMIT,
    INLINE_KEYS_BUDGET,
    RenderedNode,
    render_cluster,
    render_node,
    yaml_literal,
    yaml_quoted,
)
from tests.nodes.conftest import CHARTS
from tests.nodes.fakes import many_users, with_users
from tests.nodes.tools import ignition_files

TLS = "/var/lib/rancher/k3s/server/tls"
MANIFESTS = "/var/lib/rancher/k3s/server/manifests"
K3S_CONFIG = "/etc/rancher/k3s/config.yaml"


def test_every_node_is_rendered_in_fleet_order(
    cluster: Cluster, rendered: dict[str, RenderedNode]
) -> None:
    assert list(rendered) == ["control-plane", "agent-0", "agent-1", "agent-2"]
    for name, node in rendered.items():
        config = json.loads(node.ignition)
        assert config["ignition"]["version"] == "3.3.0"
        assert node.node.name == name
        assert len(node.ignition) <= IGNITION_LIMIT
        assert node.butane.startswith("variant: fcos\nversion: 1.4.0\n")


def test_rendering_is_deterministic(
    cluster: Cluster,
    secrets: ClusterSecrets,
    users: tuple[UserKeys, ...],
    rendered: dict[str, RenderedNode],
) -> None:
    again = render_cluster(cluster, secrets, users, charts=CHARTS)
    assert [(n.butane, n.ignition) for n in again] == [
        (n.butane, n.ignition) for n in rendered.values()
    ]
    # render_node gives the same bytes as render_cluster
    assert render_node(
        cluster, cluster.agents[1], secrets, users, charts=CHARTS,
    ) == rendered["agent-1"]


def test_adding_an_agent_changes_no_other_node(
    cluster: Cluster,
    secrets: ClusterSecrets,
    users: tuple[UserKeys, ...],
    rendered: dict[str, RenderedNode],
) -> None:
    types = (*(node.server_type for node in cluster.agents), "cx23")
    grown = build_cluster(cluster.config, types, "agents.json")
    after = render_cluster(grown, secrets, users, charts=CHARTS)
    assert [n.node.name for n in after][-1] == "agent-3"
    for node in after[:-1]:
        assert node.ignition == rendered[node.node.name].ignition


def test_an_agent_depends_on_nothing_of_the_control_planes_private_keys(
    cluster: Cluster,
    secrets: ClusterSecrets,
    users: tuple[UserKeys, ...],
    rendered: dict[str, RenderedNode],
) -> None:
    other = generate_example_secrets()
    mixed = dataclasses.replace(
        other,
        join_secret=secrets.join_secret,
        server_ca=CertificateAuthority(cert_pem=secrets.server_ca.cert_pem, key_pem="gone"),
        external_dns_key="gone",
        cert_manager_key="gone",
    )
    for agent in cluster.agents:
        node = render_node(cluster, agent, mixed, users, charts=CHARTS)
        assert node.ignition == rendered[agent.name].ignition
    with pytest.raises(RenderError, match=r"server_ca\.key_pem"):
        render_node(cluster, cluster.control_plane, mixed, users, charts=CHARTS)


def test_token_invariant_holds_on_the_rendered_bytes(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    cp_files = ignition_files(rendered["control-plane"].ignition)
    ca_bytes = cp_files[f"{TLS}/server-ca.crt"]
    cp_secret = yaml.safe_load(cp_files[K3S_CONFIG])["token"]
    assert cp_secret == secrets.join_secret
    for agent in cluster.agents:
        files = ignition_files(rendered[agent.name].ignition)
        token = yaml.safe_load(files[K3S_CONFIG])["token"]
        match = re.fullmatch(r"K10([0-9a-f]{64})::server:(.+)", token)
        assert match, token
        assert match[1] == hashlib.sha256(ca_bytes).hexdigest()
        assert match[2] == cp_secret


def test_control_plane_config(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    assert yaml.safe_load(files[K3S_CONFIG]) == {
        "token": secrets.join_secret,
        "node-name": "control-plane",
        "node-ip": "10.0.1.10",
        "advertise-address": "10.0.1.10",
        "flannel-iface": "enp7s0",
        "tls-san": ["cp.raya.example.com"],
    }
    assert files["/etc/hostname"] == b"control-plane\n"
    for name, ca in (("server-ca", secrets.server_ca), ("client-ca", secrets.client_ca)):
        assert files[f"{TLS}/{name}.crt"] == ca.cert_pem.encode()
        assert files[f"{TLS}/{name}.key"] == ca.key_pem.encode()


def test_service_account_keys_are_kube_system_secrets(
    secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    secret_files = {f"{MANIFESTS}/{file}" for file, _ in GCP_SECRETS.values()}
    manifests = {path: data for path, data in files.items() if path in secret_files}
    assert len(manifests) == 2
    names = [path.rsplit("/", 1)[1].split(".")[0] for path in manifests]
    assert len(set(names)) == 2
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) for name in names)
    found = set()
    for data in manifests.values():
        secret = yaml.safe_load(data)
        assert (secret["apiVersion"], secret["kind"]) == ("v1", "Secret")
        assert secret["metadata"]["namespace"] == "kube-system"
        assert set(secret) == {"apiVersion", "kind", "metadata", "type", "stringData"}
        found.add(secret["stringData"]["credentials.json"])
    assert found == {secrets.external_dns_key, secrets.cert_manager_key}


def test_agent_config(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    passwords = set()
    for agent in cluster.agents:
        files = ignition_files(rendered[agent.name].ignition)
        config = yaml.safe_load(files[K3S_CONFIG])
        assert {k: v for k, v in config.items() if k != "token"} == {
            "server": "https://10.0.1.10:6443",
            "node-name": agent.name,
            "node-ip": str(agent.private_ip),
            "flannel-iface": "enp7s0",
        }
        assert agent.index is not None
        password = files["/etc/rancher/node/password"].decode()
        assert password == node_password(secrets.join_secret, agent.index) + "\n"
        passwords.add(password)
        everything = rendered[agent.name].ignition + b"".join(files.values())
        assert b"PRIVATE KEY" not in everything
        for secret in (
            secrets.server_ca.key_pem,
            secrets.client_ca.cert_pem,
            secrets.external_dns_key,
            secrets.cert_manager_key,
        ):
            assert secret.encode() not in everything
        assert not any(path.startswith("/var/lib/rancher") for path in files)
    assert len(passwords) == len(cluster.agents)


def test_example_keys_are_inline_for_core(
    users: tuple[UserKeys, ...], rendered: dict[str, RenderedNode]
) -> None:
    for node in rendered.values():
        config = json.loads(node.ignition)
        assert config["passwd"]["users"] == [
            {"name": "core", "sshAuthorizedKeys": list(authorized_keys(users))}
        ]


def test_fifty_users_with_three_rsa4096_keys_fit_pinned(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    users = many_users(50, long_handles=True)  # the longest GitHub logins: the worst case
    text = "".join(key + "\n" for key in authorized_keys(users)).encode()
    # The measurement behind the design: no compression makes these fit inline.
    assert len(gzip.compress(text, 9, mtime=0)) > IGNITION_LIMIT
    big = with_users(cluster, users)
    nodes = render_cluster(big, secrets, users, keys_base_url="http://127.0.0.1:9", charts=CHARTS)
    for node in nodes:
        assert len(node.ignition) <= IGNITION_LIMIT, (node.node.name, len(node.ignition))
        config = json.loads(node.ignition)
        assert config["passwd"]["users"] == [{"name": "core"}]
        pinned = {
            entry["path"]: entry
            for entry in config["storage"]["files"]
            if entry["path"].startswith("/home/core/.ssh/authorized_keys.d/")
        }
        assert len(pinned) == 50
        for user in users:
            entry = pinned[f"/home/core/.ssh/authorized_keys.d/github-{user.handle}"]
            assert entry["contents"]["source"] == f"http://127.0.0.1:9/{user.handle}.keys"
            digest = hashlib.sha256(user.raw.encode()).hexdigest()
            assert entry["contents"]["verification"]["hash"] == f"sha256-{digest}"
            assert (entry["mode"], entry["user"], entry["group"]) == (
                0o600,
                {"name": "core"},
                {"name": "core"},
            )


def test_inline_or_pinned_is_decided_by_the_keys_text_budget(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    def mode(users: tuple[UserKeys, ...]) -> str:
        node = render_node(
            with_users(cluster, users), cluster.agents[0], secrets, users, charts=CHARTS,
        )
        return (
            "inline"
            if "sshAuthorizedKeys" in json.loads(node.ignition)["passwd"]["users"][0]
            else "pinned"
        )

    key_line = len(many_users(1, 1)[0].keys[0]) + 1
    fits = INLINE_KEYS_BUDGET // key_line
    assert mode(many_users(fits, 1)) == "inline"
    assert mode(many_users(fits + 1, 1)) == "pinned"


def test_a_config_over_the_limit_names_node_size_and_biggest_parts(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    users = many_users(110, 1)
    with pytest.raises(RenderError) as caught:
        render_node(
            with_users(cluster, users), cluster.control_plane, secrets, users, charts=CHARTS,
        )
    message = str(caught.value)
    assert message.startswith("control-plane: Ignition config is ")
    size = int(re.search(r"is (\d+) bytes", message)[1])  # type: ignore[index]
    assert size > IGNITION_LIMIT
    assert "largest parts: /home/core/.ssh/authorized_keys.d/* (110 entries, " in message
    assert "/var/lib/rancher/k3s/server/manifests/* (4 entries, " in message


def test_users_must_be_exactly_the_configured_ones(
    cluster: Cluster, secrets: ClusterSecrets, users: tuple[UserKeys, ...]
) -> None:
    with pytest.raises(RenderError, match="missing: octo-bob; not configured: none"):
        render_cluster(cluster, secrets, users[:1], charts=CHARTS)
    extra = (*users, *many_users(1))
    with pytest.raises(RenderError, match="missing: none; not configured: user-00"):
        render_cluster(cluster, secrets, extra, charts=CHARTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"join_secret": "abcdef.0123456789abcdef"}, "bootstrap token"),
        ({"join_secret": "short"}, "join_secret"),
        ({"join_secret": "a" * 20 + "::x"}, "join_secret"),
        ({"external_dns_key": "{}"}, "external_dns_key is not a GCP service account key"),
        ({"cert_manager_key": "nope"}, "cert_manager_key is not JSON"),
    ],
)
def test_unusable_secrets_are_refused(
    cluster: Cluster,
    secrets: ClusterSecrets,
    users: tuple[UserKeys, ...],
    change: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(RenderError, match=message):
        render_cluster(cluster, dataclasses.replace(secrets, **change), users, charts=CHARTS)


def test_ca_certificates_are_checked(
    cluster: Cluster, secrets: ClusterSecrets, users: tuple[UserKeys, ...]
) -> None:
    ca = secrets.server_ca
    for cert_pem, message in (
        (ca.cert_pem.rstrip("\n"), "ending in one newline"),
        (ca.cert_pem + ca.cert_pem, "exactly one PEM certificate"),
        (secrets.client_ca.cert_pem, "does not belong"),
    ):
        bad = dataclasses.replace(secrets, server_ca=CertificateAuthority(cert_pem, ca.key_pem))
        with pytest.raises(RenderError, match=message):
            render_cluster(cluster, bad, users, charts=CHARTS)


def test_an_undefined_template_variable_is_an_error(
    cluster: Cluster,
    secrets: ClusterSecrets,
    users: tuple[UserKeys, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = render_module._context

    def without_tls_san(*args):
        context = original(*args)
        del context["tls_san"]
        return context

    monkeypatch.setattr(render_module, "_context", without_tls_san)
    with pytest.raises(RenderError, match=r"control-plane.*'tls_san' is undefined"):
        render_node(cluster, cluster.control_plane, secrets, users, charts=CHARTS)


@given(st.text())
def test_quoted_scalars_read_back_exactly(text: str) -> None:
    assert yaml.safe_load(f"key: {yaml_quoted(text)}\n") == {"key": text}


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"])), st.integers(0, 6))
def test_literal_blocks_read_back_exactly(text: str, indent: int) -> None:
    document = f"outer:\n  key: {yaml_literal(text, indent + 4)}\n  next: 1\n"
    assert yaml.safe_load(document) == {"outer": {"key": text, "next": 1}}


def test_a_node_from_another_fleet_is_refused(
    cluster: Cluster, secrets: ClusterSecrets, users: tuple[UserKeys, ...]
) -> None:
    bigger = build_cluster(cluster.config, ("cx23",) * 5, "agents.json")
    with pytest.raises(RenderError, match="agent-4: not a node of cluster raya"):
        render_node(cluster, bigger.agents[4], secrets, users, charts=CHARTS)


def test_the_keys_base_url_must_be_http(cluster: Cluster, secrets: ClusterSecrets) -> None:
    users = many_users(12)
    with pytest.raises(RenderError, match="keys_base_url is 'file:///etc'"):
        render_cluster(
            with_users(cluster, users), secrets, users, keys_base_url="file:///etc", charts=CHARTS,
        )


RENDER_IN_A_PROCESS = """
import hashlib, json, sys
from raya.github_keys import load_keys_file
from raya.identity import CertificateAuthority, ClusterSecrets
from raya.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.pins import load_chart_pins
from raya.render import render_cluster
data = json.load(open(sys.argv[1]))
for ca in ("server_ca", "client_ca"):
    data[ca] = CertificateAuthority(**data[ca])
nodes = render_cluster(
    load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK),
    ClusterSecrets(**data),
    load_keys_file(EXAMPLE_ROOT / "keys.json"),
    charts=load_chart_pins(EXAMPLE_ROOT),
)
print(json.dumps([hashlib.sha256(node.ignition).hexdigest() for node in nodes]))
"""


def test_rendering_does_not_depend_on_the_process(
    secrets: ClusterSecrets, rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    """Same bytes from fresh interpreters with different hash seeds (set and dict order)."""
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps(dataclasses.asdict(secrets)))
    expected = [hashlib.sha256(node.ignition).hexdigest() for node in rendered.values()]
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", RENDER_IN_A_PROCESS, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == expected
