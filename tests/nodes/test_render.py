"""Rendering, on the bytes: contents, invariants, determinism, size. No external tools."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from raya.butane import dataurl
from raya.errors import RenderError
from raya.model.fleet import Cluster, build_cluster, node_password
from raya.nodes import render as render_module
from raya.nodes.addons import GCP_SECRETS
from raya.nodes.identity import (
    CertificateAuthority,
    ClusterSecrets,
    HostKey,
    example_host_key,
    generate_example_secrets,
)
from raya.nodes.render import (
    SSH_HANDLES_FILE,
    RenderedNode,
    part_digests,
    render_cluster,
    render_node,
    yaml_literal,
    yaml_quoted,
)
from tests.nodes.conftest import CHARTS, VOLUME_ID
from tests.nodes.fakes import many_users, with_users
from tests.nodes.tools import ignition_files

# Seeded on the root disk, copied onto the volume by raya-k3s-seed.service.
TLS = "/var/lib/raya/k3s-server-seed/tls"
MANIFESTS = "/var/lib/raya/k3s-server-seed/manifests"
K3S_CONFIG = "/etc/rancher/k3s/config.yaml"
# Hetzner Cloud API, POST /servers: `user_data` holds at most 32 KiB.
USER_DATA_LIMIT = 32 * 1024
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"


def test_every_node_is_rendered_in_fleet_order(
    cluster: Cluster, rendered: dict[str, RenderedNode]
) -> None:
    assert list(rendered) == ["control-plane", "agent-0", "agent-1", "agent-2"]
    for name, node in rendered.items():
        config = json.loads(node.ignition)
        assert config["ignition"]["version"] == "3.3.0"
        assert node.node.name == name
        assert len(node.ignition) <= USER_DATA_LIMIT
        assert node.butane.startswith("variant: fcos\nversion: 1.4.0\n")


def test_rendering_is_deterministic(
    cluster: Cluster,
    secrets: ClusterSecrets,
    rendered: dict[str, RenderedNode],
) -> None:
    again = render_cluster(cluster, secrets, volume_id=VOLUME_ID, charts=CHARTS)
    assert [(n.butane, n.ignition) for n in again] == [
        (n.butane, n.ignition) for n in rendered.values()
    ]
    # render_node gives the same bytes as render_cluster
    assert render_node(cluster, cluster.agents[1], secrets, charts=CHARTS) == rendered["agent-1"]


def test_a_fleet_renders_as_each_node_alone(cluster: Cluster, secrets: ClusterSecrets) -> None:
    """Nodes share the work of what they have alike (compiled templates, literal blocks,
    compressed contents): each node's bytes are still those it renders to with nothing
    shared."""
    fleet = build_cluster(cluster.config, ("cx23",) * 8, "test")
    nodes = render_cluster(fleet, secrets, volume_id=VOLUME_ID, charts=CHARTS)
    for node in nodes:
        dataurl._gzip_if_shorter.cache_clear()
        render_module.yaml_literal.cache_clear()
        render_module._environment.cache_clear()
        assert render_node(fleet, node.node, secrets, volume_id=VOLUME_ID, charts=CHARTS) == node


def test_adding_an_agent_changes_no_other_node(
    cluster: Cluster,
    secrets: ClusterSecrets,
    rendered: dict[str, RenderedNode],
) -> None:
    types = (*(node.server_type for node in cluster.agents), "cx23")
    grown = build_cluster(cluster.config, types, "agents.json")
    after = render_cluster(grown, secrets, volume_id=VOLUME_ID, charts=CHARTS)
    assert [n.node.name for n in after][-1] == "agent-3"
    for node in after[:-1]:
        assert node.ignition == rendered[node.node.name].ignition


def test_an_agent_depends_on_nothing_of_the_control_planes_private_keys(
    cluster: Cluster,
    secrets: ClusterSecrets,
    rendered: dict[str, RenderedNode],
) -> None:
    other = generate_example_secrets(())
    mixed = dataclasses.replace(
        other,
        host_keys=secrets.host_keys,
        join_secret="",  # nor of the server token
        agent_secret=secrets.agent_secret,
        server_ca=CertificateAuthority(cert_pem=secrets.server_ca.cert_pem, key_pem="gone"),
        external_dns_key="gone",
        cert_manager_key="gone",
    )
    for agent in cluster.agents:
        node = render_node(cluster, agent, mixed, charts=CHARTS)
        assert node.ignition == rendered[agent.name].ignition
    with pytest.raises(RenderError, match="join_secret is not usable"):
        render_node(cluster, cluster.control_plane, mixed, volume_id=VOLUME_ID, charts=CHARTS)
    keyless = dataclasses.replace(mixed, join_secret=secrets.join_secret)
    with pytest.raises(RenderError, match=r"server_ca\.key_pem"):
        render_node(cluster, cluster.control_plane, keyless, volume_id=VOLUME_ID, charts=CHARTS)


def test_token_invariant_holds_on_the_rendered_bytes(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    cp_files = ignition_files(rendered["control-plane"].ignition)
    ca_bytes = cp_files[f"{TLS}/server-ca.crt"]
    cp_config = yaml.safe_load(cp_files[K3S_CONFIG])
    assert cp_config["token"] == secrets.join_secret
    assert cp_config["agent-token"] == secrets.agent_secret != secrets.join_secret
    for agent in cluster.agents:
        files = ignition_files(rendered[agent.name].ignition)
        token = yaml.safe_load(files[K3S_CONFIG])["token"]
        # k3s' `node` user with the agent token: joins agents, never servers.
        match = re.fullmatch(r"K10([0-9a-f]{64})::node:(.+)", token)
        assert match, token
        assert match[1] == hashlib.sha256(ca_bytes).hexdigest()
        assert match[2] == cp_config["agent-token"]


def test_no_agent_holds_the_server_token(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    """On the Ignition bytes and on every file they carry, decoded (gzip and base64
    included), neither the server token's secret nor its full form appears."""
    ca_hash = hashlib.sha256(secrets.server_ca.cert_pem.encode()).hexdigest()
    server_token = f"K10{ca_hash}::server:{secrets.join_secret}"
    control_plane = rendered["control-plane"].ignition
    assert secrets.join_secret.encode() in b"".join(ignition_files(control_plane).values())
    for agent in cluster.agents:
        ignition = rendered[agent.name].ignition
        everything = ignition + b"".join(ignition_files(ignition).values())
        for secret in (secrets.join_secret, server_token, "::server:"):
            assert secret.encode() not in everything, agent.name


def test_control_plane_config(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    assert yaml.safe_load(files[K3S_CONFIG]) == {
        # Embedded etcd at every size (docs/control-plane.md): one control plane starts it.
        "cluster-init": True,
        "token": secrets.join_secret,
        "agent-token": secrets.agent_secret,
        "node-name": "control-plane",
        "node-ip": "10.0.1.10",
        "advertise-address": "10.0.1.10",
        "flannel-iface": "enp7s0",
        # The API name, and where the registration balancer of several would be.
        "tls-san": ["cp.raya.example.com", "10.0.1.15"],
        # raya:controlPlaneSchedulable defaults to false: workloads stay off the CA keys.
        "node-taint": ["node-role.kubernetes.io/control-plane:NoSchedule"],
        # Hetzner's cloud controller initialises the nodes, its load balancers replace
        # ServiceLB (docs/hetzner.md).
        "kubelet-arg": ["cloud-provider=external"],
        # containerd labels containers (enable_selinux): container_t.
        "selinux": True,
        "disable-cloud-controller": True,
        "disable": ["servicelb"],
        # Snapshots every 6 hours, 28 kept on the node and 28 in the bucket (docs/backups.md),
        # uploaded with the settings of a Secret: no S3 key here.
        "etcd-snapshot-schedule-cron": "0 */6 * * *",
        "etcd-snapshot-retention": 28,
        "etcd-s3": True,
        "etcd-s3-config-secret": "raya-etcd-s3",
        "etcd-s3-retention": 28,
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


def test_every_node_carries_its_own_host_key(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    public_keys = set()
    for node in cluster.nodes:
        files = ignition_files(rendered[node.name].ignition)
        key = secrets.host_keys[node.name]
        assert files[HOST_KEY].decode() == key.private_openssh
        assert files[HOST_KEY + ".pub"].decode() == key.public_openssh + "\n"
        public_keys.add(key.public_openssh)
    assert len(public_keys) == len(cluster.nodes)


def test_a_node_without_a_valid_host_key_is_refused(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    agent = cluster.agents[0]
    missing = dataclasses.replace(secrets, host_keys={})
    with pytest.raises(RenderError, match=r"host_keys\[agent-0\] is missing"):
        render_node(cluster, agent, missing, charts=CHARTS)
    other = example_host_key()
    mismatched = HostKey(secrets.host_keys[agent.name].private_openssh, other.public_openssh)
    wrong = dataclasses.replace(secrets, host_keys={agent.name: mismatched})
    with pytest.raises(RenderError, match="not the public half"):
        render_node(cluster, agent, wrong, charts=CHARTS)
    garbage = dataclasses.replace(secrets, host_keys={agent.name: HostKey("x", "y")})
    with pytest.raises(RenderError, match="not an unencrypted OpenSSH key"):
        render_node(cluster, agent, garbage, charts=CHARTS)


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
            "kubelet-arg": ["cloud-provider=external"],  # every kubelet, not only the server's
            "selinux": True,  # every node's containers confined, not only the server's
        }
        assert agent.index is not None
        password = files["/etc/rancher/node/password"].decode()
        assert password == node_password(secrets.agent_secret, agent.name) + "\n"
        passwords.add(password)
        # Its own SSH host key is the one private key an agent holds.
        assert files.pop(HOST_KEY).decode() == secrets.host_keys[agent.name].private_openssh
        everything = rendered[agent.name].ignition + b"".join(files.values())
        assert b"PRIVATE KEY" not in everything
        for secret in (
            secrets.join_secret,
            secrets.server_ca.key_pem,
            secrets.client_ca.cert_pem,
            secrets.external_dns_key,
            secrets.cert_manager_key,
        ):
            assert secret.encode() not in everything
        assert not any(path.startswith("/var/lib/rancher") for path in files)
    assert len(passwords) == len(cluster.agents)


# Zincati's configuration keys, from its own deserializer (coreos/zincati,
# src/config/fragments.rs: ConfigFragment and UpdateFragment); docs/usage/auto-updates.md
# documents `[updates] enabled = false` in /etc/zincati/config.d/90-*.toml to disable them.
ZINCATI_SECTIONS = {"agent", "cincinnati", "identity", "updates"}
ZINCATI_UPDATES = {"allow_downgrade", "enabled", "strategy", "fleet_lock", "periodic"}
ZINCATI_DROPIN = "/etc/zincati/config.d/90-raya-disable-auto-updates.toml"


def test_every_node_turns_zincati_auto_updates_off(rendered: dict[str, RenderedNode]) -> None:
    for name, node in rendered.items():
        config = json.loads(node.ignition)
        (entry,) = [e for e in config["storage"]["files"] if e["path"] == ZINCATI_DROPIN]
        assert entry["mode"] == 0o644, name
        dropin = tomllib.loads(ignition_files(node.ignition)[ZINCATI_DROPIN].decode())
        assert set(dropin) <= ZINCATI_SECTIONS and set(dropin["updates"]) <= ZINCATI_UPDATES
        assert dropin == {"updates": {"enabled": False}}, name


def test_no_key_travels_in_any_config_only_the_handles(
    cluster: Cluster, rendered: dict[str, RenderedNode]
) -> None:
    for node in rendered.values():
        config = json.loads(node.ignition)
        assert config["passwd"]["users"] == [{"name": "core"}]
        files = ignition_files(node.ignition)
        assert files[SSH_HANDLES_FILE] == b"octo-alice\nocto-bob\n"
        # The one public key a config carries is the node's own host key.
        files.pop(HOST_KEY + ".pub")
        assert b"ssh-ed25519 AAAA" not in node.ignition + b"".join(files.values())
        units = {unit["name"]: unit for unit in config["systemd"]["units"]}
        assert units["raya-ssh-keys.timer"]["enabled"] is True
        assert "OnUnitActiveSec=15min" in units["raya-ssh-keys.timer"]["contents"]
        assert units["raya-ssh-keys.service"]["contents"].count(
            "ExecStart=/usr/local/bin/raya-ssh-keys --retry https://github.com "
            f"{SSH_HANDLES_FILE} /home/core/.ssh/authorized_keys.d/raya\n"
        ) == 1


def test_fifty_longest_handles_fit_and_keys_never_weigh(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    users = many_users(50, keys_each=3, long_handles=True)
    nodes = render_cluster(with_users(cluster, users), secrets, volume_id=VOLUME_ID, charts=CHARTS)
    for node in nodes:
        assert len(node.ignition) <= USER_DATA_LIMIT, (node.node.name, len(node.ignition))
    files = ignition_files(nodes[0].ignition)
    assert files[SSH_HANDLES_FILE].decode().splitlines() == [user.handle for user in users]


def test_part_digests_tell_users_from_config(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    more = with_users(cluster, many_users(3))
    nodes = render_cluster(more, secrets, volume_id="7", charts=CHARTS)
    other = {node.node.name: node for node in nodes}
    for name, node in rendered.items():
        before, after = part_digests(node.ignition), part_digests(other[name].ignition)
        assert before["users"] != after["users"]
        # Only the control plane's config names the volume.
        assert (before["config"] == after["config"]) == (name != "control-plane")
        assert all(re.fullmatch(r"[0-9a-f]{16}", value) for value in before.values())


def test_the_control_plane_keeps_its_state_on_its_volume(
    secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    """The volume is waited for, checked and mounted by units, not by Ignition (whose
    initramfs wait ends in the emergency shell when Hetzner attaches it late); what goes
    onto it is seeded on the root disk."""
    config = json.loads(rendered["control-plane"].ignition)
    assert "filesystems" not in config["storage"]
    device = f"/dev/disk/by-id/scsi-0HC_Volume_{VOLUME_ID}"
    units = {u["name"]: u["contents"] for u in config["systemd"]["units"] if "contents" in u}
    mount = units["var-lib-rancher-k3s-server.mount"].splitlines()
    assert {"Where=/var/lib/rancher/k3s/server", f"What={device}", "Type=ext4"} <= set(mount)
    # Not ordered before local-fs.target: a missing volume must not hold the boot.
    assert "DefaultDependencies=no" in mount
    assert "Requires=raya-k3s-volume.service" in mount
    # The mount binds to the device: its start job waits for a late attach without the
    # default 90 s deadline.
    (device_unit,) = [u for u in config["systemd"]["units"] if u["name"].endswith(".device")]
    assert device_unit["name"] == f"dev-disk-by\\x2did-scsi\\x2d0HC_Volume_{VOLUME_ID}.device"
    (dropin,) = device_unit["dropins"]
    assert "JobRunningTimeoutSec=infinity" in dropin["contents"].splitlines()
    volume = units["raya-k3s-volume.service"].splitlines()
    assert "TimeoutStartSec=infinity" in volume
    assert f"ExecStart=/usr/local/bin/raya-k3s-volume {device} raya-k3s-server" in volume
    k3s = units["k3s.service"].splitlines()
    assert "RequiresMountsFor=/var/lib/rancher/k3s/server" in k3s
    assert {"Requires=raya-k3s-seed.service", "After=raya-k3s-seed.service"} <= set(k3s)
    seeded = [
        entry["path"]
        for entry in config["storage"]["files"]
        if entry["path"].startswith("/var/lib/raya/k3s-server-seed/")
    ]
    # The four CA files and the six manifests (the two service account Secrets, the cluster's
    # Hetzner token's Secret, the snapshots' S3 Secret, the HelmCharts, the issuers).
    assert len(seeded) == 10
    # The seed folder is fresh on each boot (the root disk is new): no seeded file overwrites.
    overwriting = [
        entry["path"]
        for entry in config["storage"]["files"]
        if entry["path"] in seeded and entry.get("overwrite")
    ]
    assert overwriting == []
    on_volume = "/var/lib/rancher/k3s/server"
    assert not [e for e in config["storage"]["files"] if e["path"].startswith(on_volume)]
    files = ignition_files(rendered["control-plane"].ignition)
    password = files["/etc/rancher/node/password"].decode()
    assert password == node_password(secrets.agent_secret, "control-plane") + "\n"


def test_certificate_checks_are_staggered_by_node(rendered: dict[str, RenderedNode]) -> None:
    """Each node checks k3s' certificates daily in a slot of its own, 30 minutes apart
    (control plane 03:00 UTC, agent-i at 03:30 + 30 min * i), with a random delay of at most
    15 minutes, so no two nodes restart k3s within the same quarter hour; the check uses
    k3s' 90-day renewal window against what each node serves."""
    slots = {}
    for name, node in rendered.items():
        config = json.loads(node.ignition)
        units = {u["name"]: u.get("contents", "") for u in config["systemd"]["units"]}
        timer = units["raya-k3s-certs.timer"].splitlines()
        assert {"RandomizedDelaySec=15min", "FixedRandomDelay=true"} <= set(timer)
        (calendar,) = [line for line in timer if line.startswith("OnCalendar=")]
        slots[name] = calendar.removeprefix("OnCalendar=")
        (command,) = [
            line for line in units["raya-k3s-certs.service"].splitlines()
            if line.startswith("ExecStart=")
        ]  # fmt: skip
        k3s = "k3s.service" if name == "control-plane" else "k3s-agent.service"
        served = ["https://127.0.0.1:10250"]
        if name == "control-plane":
            served.insert(0, "https://127.0.0.1:6444")
        assert command.split()[1:] == [k3s, "90", *served]
    assert slots == {
        "control-plane": "*-*-* 03:00:00 UTC",
        "agent-0": "*-*-* 03:30:00 UTC",
        "agent-1": "*-*-* 04:00:00 UTC",
        "agent-2": "*-*-* 04:30:00 UTC",
    }


@pytest.mark.parametrize("volume_id", [None, "", "vol-1"])
def test_the_control_plane_needs_its_volume_id(
    cluster: Cluster, secrets: ClusterSecrets, volume_id: str | None
) -> None:
    with pytest.raises(RenderError, match=r"control-plane: volume_id is .*; accepted: a Hetzner"):
        render_node(cluster, cluster.control_plane, secrets, volume_id=volume_id, charts=CHARTS)


def test_a_config_over_the_limit_names_node_size_and_biggest_parts(
    cluster: Cluster, secrets: ClusterSecrets, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render_module, "IGNITION_LIMIT", 6000)
    with pytest.raises(RenderError) as caught:
        render_node(cluster, cluster.control_plane, secrets, volume_id=VOLUME_ID, charts=CHARTS)
    message = str(caught.value)
    assert message.startswith("control-plane: Ignition config is ")
    size = int(re.search(r"is (\d+) bytes", message)[1])  # type: ignore[index]
    assert size > 6000
    assert "over Hetzner's user_data limit of 6000" in message
    assert "/var/lib/raya/k3s-server-seed/manifests/* (6 entries, " in message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"join_secret": "abcdef.0123456789abcdef"}, "bootstrap token"),
        ({"join_secret": "short"}, "join_secret"),
        ({"join_secret": "a" * 20 + "::x"}, "join_secret"),
        ({"agent_secret": "short"}, "agent_secret"),
        ({"agent_secret": "abcdef.0123456789abcdef"}, "agent_secret .*bootstrap token"),
        ({"external_dns_key": "{}"}, "external_dns_key is not a GCP service account key"),
        ({"cert_manager_key": "nope"}, "cert_manager_key is not JSON"),
        ({"hcloud_token": ""}, r"hcloud_token \(raya:clusterHcloudToken\) is 0 characters"),
        ({"hcloud_token": "a" * 63}, "hcloud_token .* is 63 characters; accepted: a Hetzner"),
        ({"hcloud_token": "a" * 32 + " " + "a" * 31}, "hcloud_token .* is 64 characters"),
    ],
)
def test_unusable_secrets_are_refused(
    cluster: Cluster,
    secrets: ClusterSecrets,
    change: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(RenderError, match=message):
        changed = dataclasses.replace(secrets, **change)
        render_cluster(cluster, changed, volume_id=VOLUME_ID, charts=CHARTS)


def test_the_agent_secret_must_not_be_the_server_secret(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    same = dataclasses.replace(secrets, agent_secret=secrets.join_secret)
    with pytest.raises(RenderError, match="agent_secret equals join_secret"):
        render_cluster(cluster, same, volume_id=VOLUME_ID, charts=CHARTS)


def test_a_schedulable_control_plane_is_not_tainted(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    config = dataclasses.replace(cluster.config, control_plane_schedulable=True)
    schedulable = dataclasses.replace(cluster, config=config)
    node = render_node(
        schedulable, schedulable.control_plane, secrets, volume_id=VOLUME_ID, charts=CHARTS
    )
    assert "node-taint" not in yaml.safe_load(ignition_files(node.ignition)[K3S_CONFIG])


def test_ca_certificates_are_checked(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    ca = secrets.server_ca
    for cert_pem, message in (
        (ca.cert_pem.rstrip("\n"), "ending in one newline"),
        (ca.cert_pem + ca.cert_pem, "exactly one PEM certificate"),
        (secrets.client_ca.cert_pem, "does not belong"),
    ):
        bad = dataclasses.replace(secrets, server_ca=CertificateAuthority(cert_pem, ca.key_pem))
        with pytest.raises(RenderError, match=message):
            render_cluster(cluster, bad, volume_id=VOLUME_ID, charts=CHARTS)


def test_an_undefined_template_variable_is_an_error(
    cluster: Cluster,
    secrets: ClusterSecrets,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = render_module._context

    def without_tls_san(*args):
        context = original(*args)
        del context["tls_san"]
        return context

    monkeypatch.setattr(render_module, "_context", without_tls_san)
    with pytest.raises(RenderError, match=r"control-plane.*'tls_san' is undefined"):
        render_node(cluster, cluster.control_plane, secrets, volume_id=VOLUME_ID, charts=CHARTS)


# No deadline: speed is measured in bench/, never asserted in a test.
@settings(deadline=None)
@given(st.text())
def test_quoted_scalars_read_back_exactly(text: str) -> None:
    assert yaml.safe_load(f"key: {yaml_quoted(text)}\n") == {"key": text}


@settings(deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"])), st.integers(0, 6))
def test_literal_blocks_read_back_exactly(text: str, indent: int) -> None:
    document = f"outer:\n  key: {yaml_literal(text, indent + 4)}\n  next: 1\n"
    assert yaml.safe_load(document) == {"outer": {"key": text, "next": 1}}


def test_a_node_from_another_fleet_is_refused(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    bigger = build_cluster(cluster.config, ("cx23",) * 5, "agents.json")
    with pytest.raises(RenderError, match="agent-4: not a node of cluster raya"):
        render_node(cluster, bigger.agents[4], secrets, charts=CHARTS)


RENDER_IN_A_PROCESS = """
import hashlib, json, sys
from raya.nodes.identity import CertificateAuthority, ClusterSecrets, HostKey
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.model.pins import load_chart_pins
from raya.nodes.render import render_cluster
data = json.load(open(sys.argv[1]))
for ca in ("server_ca", "client_ca"):
    data[ca] = CertificateAuthority(**data[ca])
data["host_keys"] = {name: HostKey(**key) for name, key in data["host_keys"].items()}
nodes = render_cluster(
    load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK),
    ClusterSecrets(**data),
    volume_id="4242",
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


def test_rendering_imports_no_http_client() -> None:
    """`raya render` and the deployment's renders import raya.nodes.render, which reads only
    constants of github_keys: its HTTP client (urllib.request, http.client, ssl) and thread
    pool load when keys are fetched, not with the module."""
    probe = "import sys, raya.nodes.render; print(' '.join(sys.modules))"
    loaded = set(subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                                text=True).stdout.split())
    assert "raya.nodes.github_keys" in loaded  # so the probe sees the module in question
    heavy = {"urllib.request", "http.client", "ssl", "concurrent.futures"}
    assert not loaded & heavy, sorted(loaded & heavy)
