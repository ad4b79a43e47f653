"""Every node config booted under real systemd and NetworkManager (systemd-nspawn) on a
simulated Hetzner network, asserted from the node's own journal and state."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from raya.nodes.github_keys import authorized_keys
from raya.nodes.identity import ClusterSecrets
from tests.boot.balancer import Balancer
from tests.boot.scenarios import (
    FLEET,
    GITHUB_UNAVAILABLE_FOR,
    NEVER_WATCHED,
    Boots,
    Scenario,
    boot_everything,
    k3s_unit,
)
from tests.boot.sim import EXAMPLE_USERS, FOREIGN_LABEL, BootedNode, Event
from tests.nodes.conftest import VOLUME_ID
from tests.nodes.tools import ignition_files
from tests.support import require_root, require_tool

CONTROL_PLANE = "https://10.0.1.10:6443"
DEVICE = f"/dev/disk/by-id/scsi-0HC_Volume_{VOLUME_ID}"
SERVER_DIR = "/var/lib/rancher/k3s/server"
SEED = "var/lib/raya/k3s-server-seed"


@pytest.fixture(scope="module")
def tools() -> None:
    for tool in ("debootstrap", "systemd-nspawn", "ip", "dnsmasq", "nsenter", "journalctl",
                 "losetup", "mkfs.ext4", "blkid"):  # fmt: skip
        require_tool(tool)
    require_root("the boot tests (namespaces, mounts, nspawn, loop devices)")


@pytest.fixture(scope="module")
def boots(tools: None) -> Iterator[Boots]:
    with boot_everything() as everything:
        yield everything


@pytest.fixture(scope="module")
def fleet(boots: Boots) -> dict[str, BootedNode]:
    return boots.fleet


@pytest.fixture(scope="module")
def impostor(boots: Boots) -> dict[str, BootedNode]:
    return boots.impostor


@pytest.fixture(scope="module")
def volumes(boots: Boots) -> dict[str, BootedNode]:
    return boots.volumes


@pytest.fixture(scope="module")
def ha(boots: Boots) -> tuple[dict[str, BootedNode], Balancer, ClusterSecrets]:
    return boots.ha


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
    _assert_reachable(node)
    # core's keys, fetched at boot from (the stand-in for) GitHub, for the handles only.
    keys = node.root / "home/core/.ssh/authorized_keys.d/raya"
    assert keys.read_text().splitlines() == list(authorized_keys(EXAMPLE_USERS))
    assert keys.stat().st_mode & 0o777 == 0o600
    assert node.job_done("raya-ssh-keys.service") is not None


def _assert_reachable(node: BootedNode) -> None:
    """Up, not in the emergency or rescue shell, and sshd answering on the public address."""
    assert node.state["ssh"].startswith("SSH-2.0-OpenSSH"), node.state["ssh"]
    assert node.state["active"]["ssh.service"] == "active"
    assert node.state["active"]["emergency.target"] == "inactive"
    assert node.state["active"]["rescue.target"] == "inactive"


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


def _assert_volume_mounted_and_seeded(node: BootedNode) -> None:
    """The volume carries raya's ext4 with the CA pairs and manifests Ignition seeded (then
    removed from the root disk), mounted before the seeding and k3s."""
    assert node.volume is not None
    probe = node.volume.probe()
    assert (probe["TYPE"], probe["LABEL"]) == ("ext4", "raya-k3s-server")
    seeded = {
        path.removeprefix(f"/{SEED}/"): data
        for path, data in ignition_files(node.plan.ignition).items()
        if path.startswith(f"/{SEED}/")
    }
    assert {"tls/server-ca.crt", "tls/server-ca.key", "tls/client-ca.key"} <= set(seeded)
    on_volume = node.volume.files()
    assert {path: on_volume.get(path) for path in seeded} == seeded
    assert not (node.root / SEED).exists()
    mounted = node.job_done("var-lib-rancher-k3s-server.mount")
    seed = node.job_done("raya-k3s-seed.service")
    k3s = node.job_done("k3s.service")
    assert mounted and seed and k3s, (mounted, seed, k3s)
    assert mounted.at <= seed.at <= k3s.at
    # The stand-in k3s read its CA from the volume (it serves with it: agents joined).
    _first(node.logged("k3s"), "serving https://10.0.1.10:6443")


def test_a_blank_volume_present_at_boot_is_formatted_and_seeded(
    fleet: dict[str, BootedNode],
) -> None:
    node = fleet["control-plane"]
    _first(node.logged("raya-k3s-volume"), f"{DEVICE} is blank: formatting it ext4")
    assert not [e for e in node.logged("raya-k3s-volume") if "waiting for" in e.message]
    _assert_volume_mounted_and_seeded(node)


@pytest.mark.parametrize("name", ["late", "very-late"])
def test_a_late_volume_is_waited_for_without_a_deadline(
    volumes: dict[str, BootedNode], name: str
) -> None:
    node = volumes[name]
    assert node.plan.volume is not None and node.plan.volume.attach_after
    late = node.plan.volume.attach_after
    waiting = _first(node.logged("raya-k3s-volume"), f"waiting for {DEVICE}")
    assert waiting.at < 15
    _first(node.logged("raya-k3s-volume"), f"{DEVICE} attached after")
    _assert_booted(node)
    _assert_volume_mounted_and_seeded(node)
    k3s = node.job_done("k3s.service")
    assert k3s is not None and k3s.at >= late


def test_a_volume_that_never_comes_leaves_the_node_up_with_k3s_stopped(
    volumes: dict[str, BootedNode],
) -> None:
    node = volumes["never"]
    waiting = _first(node.logged("raya-k3s-volume"), f"waiting for {DEVICE}")
    assert waiting.at < 15
    last = node.journal()[-1].at
    assert last >= NEVER_WATCHED - 5, last  # past systemd's 90 s device timeout
    assert node.job_done("k3s.service") is None
    assert not node.logged("k3s")
    assert node.state["active"]["k3s.service"] == "inactive"
    assert node.state["failed"] == []
    _assert_reachable(node)
    assert node.volume is not None and node.volume.digest() == node.volume.before


def test_a_volume_holding_a_foreign_filesystem_is_refused_and_untouched(
    volumes: dict[str, BootedNode],
) -> None:
    node = volumes["foreign"]
    assert node.journal()[-1].at >= NEVER_WATCHED - 5  # watched long enough for k3s to start
    refusal = _first(node.logged("raya-k3s-volume"), "left untouched; k3s stays stopped")
    assert f"{DEVICE} holds something else, not an ext4 labelled raya-k3s-server" in (
        refusal.message
    )
    assert node.job_done("k3s.service") is None
    assert not node.logged("k3s")
    assert node.state["failed"] == [
        "raya-k3s-volume.service loaded failed failed "
        "Wait for the control plane's volume and format it if blank"
    ]
    _assert_reachable(node)
    assert node.volume is not None
    assert node.volume.digest() == node.volume.before
    assert node.volume.probe()["LABEL"] == FOREIGN_LABEL


def test_the_key_fetch_retries_within_seconds_until_github_answers(
    fleet: dict[str, BootedNode],
) -> None:
    """GitHub answers 503 for the first 15 s: the fetch is tried again 2, 4, 8... s apart
    (never left to the 15-minute timer), the keys land soon after GitHub is back, and no
    unit is failed (_assert_booted)."""
    node = fleet["agent-1"]
    statuses = [status for _, _, status in node.state["github"]]
    assert statuses[0] == 503 and statuses[-1] == 200, statuses
    delays = [
        int(event.message.split("trying again in ")[1].split()[0])
        for event in node.logged("raya-ssh-keys")
        if "trying again in" in event.message
    ]
    assert len(delays) >= 2 and delays == [2 * 2**i for i in range(len(delays))], delays
    keys = node.job_done("raya-ssh-keys.service")
    assert keys is not None
    # Back at 15 s after the start of the boot; the longest wait it can be in is 16 s.
    assert keys.at < GITHUB_UNAVAILABLE_FOR + 16 + 5, keys.at


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
    # Its blank volume and no peer serving yet: it starts the cluster, as its config says.
    _first(nodes["control-plane"].logged("raya-k3s-datastore"), "no other control plane answers")
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
