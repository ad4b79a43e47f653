"""Every node config booted under real systemd and NetworkManager (systemd-nspawn) on a
simulated Hetzner network, asserted from the node's own journal and state."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from raya.nodes.github_keys import authorized_keys
from raya.nodes.identity import ClusterSecrets
from tests.boot.balancer import Balancer
from tests.boot.scenarios import FLEET, Scenario, boot_fleet, boot_ha, boot_impostor, k3s_unit
from tests.boot.sim import EXAMPLE_USERS, BootedNode, Event
from tests.support import require_root, require_tool

CONTROL_PLANE = "https://10.0.1.10:6443"


@pytest.fixture(scope="module")
def tools() -> None:
    for tool in ("debootstrap", "systemd-nspawn", "ip", "dnsmasq", "nsenter", "journalctl"):
        require_tool(tool)
    require_root("the boot tests (namespaces, mounts, nspawn)")


@pytest.fixture(scope="module")
def fleet(tools: None) -> Iterator[dict[str, BootedNode]]:
    with boot_fleet() as nodes:
        yield nodes


@pytest.fixture(scope="module")
def ha(tools: None) -> Iterator[tuple[dict[str, BootedNode], Balancer, ClusterSecrets]]:
    with boot_ha() as booted:
        yield booted


@pytest.fixture(scope="module")
def impostor(tools: None) -> Iterator[dict[str, BootedNode]]:
    with boot_impostor() as nodes:
        yield nodes


def _first(events: list[Event], text: str) -> Event:
    found = [event for event in events if text in event.message]
    assert found, f"never logged: {text}"
    return found[0]


def _assert_booted(node: BootedNode) -> None:
    """The node as provisioned: hostname, the private keyfile active with its address, MTU
    and routes, network-online.target only after it, the public address after that, k3s
    last, seeing the private address; no failed unit."""
    name, address = node.plan.name, str(node.plan.private_ip)
    k3s_log = node.logged("k3s")
    assert {event.fields["_HOSTNAME"] for event in k3s_log} == {name}
    assert (node.root / "etc/hostname").read_text() == f"{name}\n"

    assert node.state["connection"] == ["enp7s0", "100 (connected)"]
    (link,) = [link for link in node.state["addresses"] if link["ifname"] == "enp7s0"]
    assert link["mtu"] == 1450
    assert [(a["local"], a["prefixlen"]) for a in link["addr_info"]] == [(address, 32)]
    routes = {(r["dst"], r.get("gateway")) for r in node.state["routes"] if r["dev"] == "enp7s0"}
    assert routes == {("10.0.0.1", None), ("10.0.0.0/8", "10.0.0.1")}

    activated = _first(node.logged("NetworkManager"), "device (enp7s0): Activation: successful")
    online = node.job_done("network-online.target")
    public = node.job_done("raya-node-metadata.service")
    k3s = node.job_done(k3s_unit(node))
    assert online and public and k3s, (online, public, k3s)
    assert activated.at <= online.at <= public.at <= k3s.at
    _first(k3s_log, f"enp7s0 addresses at start: {address}/32")

    public_address = node.state["public_address"]
    server = node.state["server_id"]
    dropin = node.root / "etc/rancher/k3s/config.yaml.d/50-node-metadata.yaml"
    assert dropin.read_text() == (
        f'node-external-ip: "{public_address}"\n'
        f'kubelet-arg+:\n  - "provider-id=hcloud://{server}"\n'
    )
    _first(k3s_log, f'"node-external-ip": "{public_address}"')
    # Every kubelet: the external cloud provider, and its server's id from the metadata.
    _first(
        k3s_log,
        f'"kubelet-arg": ["cloud-provider=external", "provider-id=hcloud://{server}"]',
    )
    if name == "control-plane":
        # local-path stops being the default class once k3s answers (its kubectl asked).
        local_path = node.job_done("raya-local-path.service")
        assert local_path is not None and k3s.at <= local_path.at
        _first(
            node.logged("sh"),
            "kubectl annotate --overwrite storageclass local-path "
            "storageclass.kubernetes.io/is-default-class=false: done",
        )
    assert node.state["failed"] == []
    # core's keys, fetched at boot from (the stand-in for) GitHub, for the handles only.
    keys = node.root / "home/core/.ssh/authorized_keys.d/raya"
    assert keys.read_text().splitlines() == list(authorized_keys(EXAMPLE_USERS))
    assert keys.stat().st_mode & 0o777 == 0o600
    assert node.job_done("raya-ssh-keys.service") is not None


@pytest.mark.parametrize("scenario", FLEET, ids=[f"{s.node}: {s.what}" for s in FLEET])
def test_node_boots_as_provisioned(fleet: dict[str, BootedNode], scenario: Scenario) -> None:
    node = fleet[scenario.node]
    _assert_booted(node)
    if node.plan.name != "control-plane":
        _first(node.logged("k3s"), f"joined {CONTROL_PLANE}: welcome")


def test_agents_reach_the_control_plane_through_the_gateway(
    fleet: dict[str, BootedNode],
) -> None:
    """Hetzner's network is routed, not bridged (the simulation has no bridge and no proxy
    ARP on the private side): the agents' path to the control plane is via 10.0.0.1."""
    for name, node in fleet.items():
        if name != "control-plane":
            (route,) = node.state["route_to_control_plane"]
            assert (route["gateway"], route["dev"]) == ("10.0.0.1", "enp7s0"), name


def test_metadata_retried_until_it_answers(fleet: dict[str, BootedNode]) -> None:
    node = fleet["agent-2"]
    statuses = [status for _, client, status in node.state["metadata"]]
    assert statuses[0] == 503 and statuses[-1] == 200, statuses
    _first(node.logged("raya-node-metadata"), "no public-ipv4 from")


def test_an_agent_refuses_a_control_plane_with_another_ca(
    impostor: dict[str, BootedNode],
) -> None:
    _assert_booted(impostor["control-plane"])
    agent = impostor["agent-0"]
    _first(
        agent.logged("k3s"),
        f"join refused by {CONTROL_PLANE}: token CA hash does not match",
    )
    assert agent.job_done("k3s-agent.service") is None


REGISTRATION = "https://10.0.1.15:6443"  # the private load balancer of three control planes


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_three_control_planes_one_starts_the_others_join_through_the_balancer(
    ha: tuple[dict[str, BootedNode], Balancer, ClusterSecrets],
) -> None:
    nodes, balancer, secrets = ha
    for name in ("control-plane", "control-plane-1", "control-plane-2"):
        _assert_booted(nodes[name])
    first = nodes["control-plane"].logged("k3s")
    _first(first, "etcd: cluster-init, starting a new cluster")
    assert not [e for e in first if e.message.startswith(("joined", "token sha256"))]
    # The full server token: the CA hash, user `server`, the cluster's join secret.
    ca_hash = _sha256(secrets.server_ca.cert_pem)
    server_token = f"K10{ca_hash}::server:{secrets.join_secret}"
    for name in ("control-plane-1", "control-plane-2"):
        log = nodes[name].logged("k3s")
        assert not [e for e in log if "cluster-init" in e.message]
        _first(log, f"token sha256: {_sha256(server_token)}")
        # Answered by another control plane, through the balancer.
        (joined,) = [e.message for e in log if e.message.startswith("joined ")]
        prefix = f"joined {REGISTRATION} as a server: welcome to /v1-k3s/server-bootstrap from "
        assert joined.startswith(prefix), joined
        assert joined.removeprefix(prefix) in {"control-plane", "control-plane-1",
                                               "control-plane-2"} - {name}
        assert secrets.join_secret not in "".join(e.message for e in log)
    # Who reached whom through the balancer: the joiners came in from their own addresses.
    clients = {client for _, client, _ in balancer.log}
    assert {"10.0.1.11", "10.0.1.12"} <= clients


def test_an_agent_registers_through_the_balancer_while_the_first_is_down(
    ha: tuple[dict[str, BootedNode], Balancer, ClusterSecrets],
) -> None:
    nodes, balancer, secrets = ha
    agent = nodes["agent-0"]
    _assert_booted(agent)
    log = agent.logged("k3s")
    _first(log, f'"server": "{REGISTRATION}"')
    (joined,) = [e for e in log if e.message.startswith("joined ")]
    # Answered by a joiner: the first was off the network before the agent booted.
    assert joined.message in (
        f"joined {REGISTRATION}: welcome to /v1-k3s/config from control-plane-1",
        f"joined {REGISTRATION}: welcome to /v1-k3s/config from control-plane-2",
    )
    token = f"K10{_sha256(secrets.server_ca.cert_pem)}::node:{secrets.agent_secret}"
    _first(log, f"token sha256: {_sha256(token)}")
    routed = {target for _, client, target in balancer.log if client == "10.0.1.20"}
    assert routed and routed <= {"10.0.1.11", "10.0.1.12"}, balancer.log
