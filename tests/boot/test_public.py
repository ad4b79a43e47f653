"""The public mode (`raya:network: public`): its first control plane and an agent booted under
real systemd and NetworkManager (systemd-nspawn) on the simulated Hetzner network, with no
private NIC at all: k3s gets the public address from the metadata service as node-ip and the
server serves on it, with flannel's WireGuard backend and no flannel interface named; the
agent registers through the API's name (answered by the public side's DNS, as the cluster's
zone answers it); the metadata guard as before; metrics-server's files where k3s reads its
manifests (the volume's `manifests/`): raya's Deployment and the `.skip` beside k3s' own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from raya.model.fleet import build_cluster
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import generate_example_secrets
from tests.boot.scenarios import k3s_unit, render
from tests.boot.sim import BootedNode, NodePlan, VolumePlan, booted
from tests.nodes.conftest import VOLUME_ID
from tests.nodes.tools import ignition_files
from tests.support import require_root, require_tool

# The datastore guard asks four peers by name, none of which resolves here, then k3s starts.
DEADLINE = 150.0
API = "cp.raya.example.com"
SEED = "var/lib/raya/k3s-server-seed"  # where Ignition seeds what goes onto the volume


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, BootedNode]]:
    for tool in ("debootstrap", "systemd-nspawn", "ip", "dnsmasq", "nsenter", "journalctl",
                 "losetup", "mkfs.ext4", "blkid"):  # fmt: skip
        require_tool(tool)
    require_root("the boot tests (namespaces, mounts, nspawn, loop devices)")
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    config = dataclasses.replace(example.config, network="public")
    cluster = build_cluster(config, ("cx23",), "the public boot")
    rendered = render(cluster, generate_example_secrets(n.name for n in cluster.nodes))
    plans = [
        NodePlan(
            name=name,
            ignition=rendered[name].ignition,
            private_ip=rendered[name].node.private_ip,
            attachment="none",
            volume=VolumePlan(VOLUME_ID) if name == "control-plane" else None,
        )
        for name in ("control-plane", "agent-0")
    ]

    def serving(booted_node: BootedNode) -> bool:
        return booted_node.job_done(k3s_unit(booted_node)) is not None

    # The API's name holds the control plane's address (node 0 of the group).
    with booted(plans, serving, DEADLINE, names={API: 0}) as found:
        yield found


@pytest.fixture(scope="module")
def node(nodes: dict[str, BootedNode]) -> BootedNode:
    return nodes["control-plane"]


def _config(node: BootedNode) -> dict[str, object]:
    """What the stand-in k3s saw of its merged config, as it logged it."""
    (line,) = [e.message for e in node.logged("k3s") if e.message.startswith("config: ")]
    found: dict[str, object] = json.loads(line.removeprefix("config: "))
    return found


def test_k3s_runs_on_the_public_address_with_wireguard(node: BootedNode) -> None:
    public = node.state["public_address"]
    assert node.job_done("k3s.service") is not None, "k3s never started"
    config = _config(node)
    assert config["node-ip"] == public
    assert config["node-external-ip"] == public
    assert config["flannel-backend"] == "wireguard-native"
    assert "flannel-iface" not in config and "advertise-address" not in config
    # k3s advertises, and serves on, the public address (its default: node-external-ip).
    assert any(e.message == f"serving https://{public}:6443" for e in node.logged("k3s"))
    dropin = node.root / "etc/rancher/k3s/config.yaml.d/50-node-metadata.yaml"
    assert dropin.read_text().startswith(f'node-ip: "{public}"\nnode-external-ip: "{public}"\n')


def test_no_private_network_is_waited_for_and_nothing_failed(node: BootedNode) -> None:
    assert not node.has_private_nic()
    assert node.state["connection"] == []
    assert node.state["failed"] == []
    online = node.job_done("network-online.target")
    metadata = node.job_done("raya-node-metadata.service")
    k3s = node.job_done("k3s.service")
    assert online and metadata and k3s
    assert online.at <= metadata.at <= k3s.at
    assert node.state["active"]["emergency.target"] == "inactive"


def test_the_metadata_guard_is_kept(node: BootedNode) -> None:
    assert node.job_done("raya-metadata-guard.service") is not None
    rules = (node.root / "etc/nftables/raya-metadata-guard.nft").read_text()
    assert "ip daddr 169.254.169.254 counter drop" in rules


def test_the_datastore_guard_asks_its_peers_by_name(node: BootedNode) -> None:
    unit = (node.root / "etc/systemd/system/k3s.service").read_text()
    assert "cp1.raya.example.com cp2.raya.example.com cp3.raya.example.com" in unit


def test_the_agent_registers_through_the_apis_name(nodes: dict[str, BootedNode]) -> None:
    agent, server = nodes["agent-0"], nodes["control-plane"]
    assert agent.job_done("k3s-agent.service") is not None, "the agent never joined"
    config = _config(agent)
    assert config["server"] == f"https://{API}:6443"
    assert config["node-ip"] == config["node-external-ip"] == agent.state["public_address"]
    # The stand-in joins as k3s does: the CA checked by the token's hash, then the server's
    # certificate for the name (its tls-san), at the control plane's public address.
    joined = [e.message for e in agent.logged("k3s") if e.message.startswith("joined ")]
    assert joined and joined[0].startswith(f"joined https://{API}:6443")
    assert server.state["public_address"] != agent.state["public_address"]
    assert not agent.has_private_nic() and agent.state["failed"] == []


def test_metrics_server_files_are_where_k3s_reads_its_manifests(node: BootedNode) -> None:
    """k3s reads `<data dir>/server/manifests`, the volume's `manifests/` (mounted at
    /var/lib/rancher/k3s/server): there, before k3s started, the seed put raya's
    metrics-server and the `.skip` that k3s' deploy controller honours for the Deployment its
    stage writes beside it (k3s-io/k3s pkg/deploy/stage.go, `Stage`; controller.go,
    `listFilesIn`)."""
    assert node.volume is not None
    seeded = ignition_files(node.plan.ignition)
    on_volume = node.volume.files()
    for name in ("raya-metrics-server.yaml", "metrics-server/metrics-server-deployment.yaml.skip"):
        assert on_volume.get(f"manifests/{name}") == seeded[f"/{SEED}/manifests/{name}"], name
    seed, k3s = node.job_done("raya-k3s-seed.service"), node.job_done("k3s.service")
    assert seed and k3s and seed.at <= k3s.at
