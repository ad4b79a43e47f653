"""An autoscaled pool's node booted (issue 39): the pool's one config, rendered as the cluster
autoscaler gets it, booted under real systemd and NetworkManager (systemd-nspawn) beside a booted
control plane, as Hetzner gives an autoscaled server its network: its private address only from
Hetzner's DHCP on enp7s0, its name only from the metadata service. It joins with the agent
token under the server's name, gets its kubelet's credentials from the control plane (its node
password made by k3s), and publishes the SSH host key sshd-keygen made at its first boot on its
own Node object with them. The test reads that Node over the stand-in's API as `raya ssh` does
(trusting only the cluster's CA), and runs the real ssh client with `raya ssh`'s pinning
against the running node: the published key is accepted, any other refused."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from raya.cloud import kubeconfig
from raya.commands.access import _node_object
from raya.model.fleet import Fleet, Pool, build_cluster
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import ClusterSecrets, agent_token, generate_example_secrets
from raya.nodes.render import HOST_KEY_ANNOTATION, KUBELET_KUBECONFIG, render_pool
from raya.operate.ssh import known_hosts, published_entry, ssh_command
from tests.boot.scenarios import render
from tests.boot.sim import BootedNode, Hetzner, NodePlan, VolumePlan, booted, in_namespace
from tests.boot.standin import MERGE_PATCH, sign_client_certificate
from tests.nodes.conftest import VOLUME_ID
from tests.nodes.tools import ignition_files
from tests.support import require_root, require_tool

POOL = Pool(
    "burst",
    "cpx31",
    0,
    ipaddress.IPv4Network("10.0.16.0/24"),
    labels=(("tier", "burst"),),
    taints=("burst=yes:PreferNoSchedule",),
    min_size=1,  # the control plane is tainted: the pool keeps a node for the add-ons
    max_size=8,
)
# The autoscaler's names for two servers of the pool: its node group and a random number in
# hex (cluster-autoscaler/cloudprovider/hetzner, hetzner_node_group.go, `newNodeName`), and the
# addresses Hetzner picked for them in the pool's subnet (the config names neither). The second
# one's DHCP lease also routes the metadata service through the private gateway, where it never
# answers (sim.NodePlan.metadata_route).
SERVER = "raya-burst-5f1d2e3c4b5a6978"
SECOND = "raya-burst-6a7b8c9d0e1f2a3b"
ADDRESSES = {SERVER: "10.0.16.7", SECOND: "10.0.16.8"}
MACS = {SERVER: "02:00:00:00:02:01", SECOND: "02:00:00:00:02:02"}  # sim: by the node's index
API = "https://10.0.1.10:6443"  # the control plane's API, seen from Hetzner's side
OTHER = "raya-burst-00aa"  # another node of the pool, registered by the admin
# The control plane's datastore guard first asks its absent peers (about 35 s), then the
# nodes join and publish within seconds: room on a busy machine.
DEADLINE = 150.0


def _ssh(hetzner: Hetzner, entry: dict[str, str], key: str, folder: Path) -> tuple[int, str]:
    """`raya ssh`'s command line, its known_hosts holding `key`, run from the internet side
    against the running node; no user key is offered, so a host key it accepts ends in
    "Permission denied", one it refuses in "Host key verification failed"."""
    known = folder / f"known_hosts-{len(list(folder.iterdir()))}"
    known.write_text(known_hosts({**entry, "hostKey": key}))
    argv = ssh_command(entry, known, ["true"])
    quiet = ["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
             "-o", "PubkeyAuthentication=no", "-o", "PasswordAuthentication=no"]  # fmt: skip
    result = subprocess.run(
        ["ip", "netns", "exec", hetzner.namespace, require_tool("ssh"), *quiet, *argv[1:]],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return result.returncode, result.stderr


def _another_key(folder: Path) -> str:
    key = folder / "another"
    subprocess.run([require_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                   check=True)  # fmt: skip
    return " ".join(key.with_suffix(".pub").read_text().split()[:2])


def _admin(secrets: ClusterSecrets) -> str:
    """An admin kubeconfig for the booted API, as the deployment issues it (client CA,
    system:masters), trusting only the server CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = sign_client_certificate(
        secrets.client_ca, key.public_key(), kubeconfig.ADMIN_USER, [kubeconfig.ADMIN_GROUP]
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()  # fmt: skip
    return kubeconfig.build("raya", API, secrets.server_ca.cert_pem, cert, key_pem)


def _probe(secrets: ClusterSecrets) -> Callable[[Hetzner, dict[str, BootedNode]], None]:
    def probe(hetzner: Hetzner, nodes: dict[str, BootedNode]) -> None:
        """While the nodes run: Hetzner's cloud controller gives the Node its addresses (the
        server's, by its provider ID), the admin registers another node of the pool, the
        node's kubelet is asked to annotate that one, the Node is read as `raya ssh` reads
        it, and ssh is run with its pinning."""
        from kubernetes.client import CoreV1Api, V1Node, V1ObjectMeta

        admin = _admin(secrets)
        published = [name for name in ADDRESSES
                     if nodes[name].job_done("raya-host-key-publish.service")]  # fmt: skip
        with in_namespace(hetzner.namespace):
            api = kubeconfig.api_client(admin)
            try:
                core = CoreV1Api(api)
                for name in published:
                    addresses = [
                        {"type": "InternalIP", "address": ADDRESSES[name]},
                        {"type": "ExternalIP", "address": nodes[name].state["public_address"]},
                        {"type": "Hostname", "address": name},
                    ]
                    core.patch_node_status(name, {"status": {"addresses": addresses}},
                                           _content_type=MERGE_PATCH)  # fmt: skip
                core.create_node(V1Node(metadata=V1ObjectMeta(name=OTHER)))
            finally:
                api.close()
            for name in published:
                nodes[name].state["node_object"] = _node_object(admin, name)
        for name in published:  # nothing published: the tests say what is missing
            node = nodes[name]
            node.state["other_annotated"] = node.inside_status(
                "/usr/local/bin/k3s", "kubectl", "--kubeconfig", KUBELET_KUBECONFIG, "annotate",
                "--overwrite", "node", OTHER, "raya.dev/stolen=yes",
            )  # fmt: skip
            entry = published_entry(node.state["node_object"])
            node.state["entry"] = entry
            with tempfile.TemporaryDirectory(prefix="raya-boot-ssh-") as folder:
                node.state["ssh_published"] = _ssh(hetzner, entry, entry["hostKey"], Path(folder))
                another = _another_key(Path(folder))
                node.state["ssh_another"] = _ssh(hetzner, entry, another, Path(folder))

    return probe


@pytest.fixture(scope="module")
def secrets() -> ClusterSecrets:
    return generate_example_secrets(["control-plane"])


@pytest.fixture(scope="module")
def nodes(secrets: ClusterSecrets) -> Iterator[dict[str, BootedNode]]:
    for tool in ("debootstrap", "systemd-nspawn", "ip", "dnsmasq", "nsenter", "journalctl",
                 "losetup", "mkfs.ext4", "blkid", "ssh", "ssh-keygen"):  # fmt: skip
        require_tool(tool)
    require_root("the boot tests (namespaces, mounts, nspawn, loop devices)")
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    cluster = build_cluster(example.config, Fleet(agents=(), pools=(POOL,)), "the pool's boot")
    control_plane = render(cluster, secrets)["control-plane"]
    pool = render_pool(cluster, POOL, secrets).ignition  # one config for every node of it
    plans = [
        NodePlan("control-plane", control_plane.ignition, control_plane.node.private_ip,
                 volume=VolumePlan(VOLUME_ID)),
        *(NodePlan(name, pool, ipaddress.IPv4Address(address), dhcp=True,
                   metadata_route=name == SECOND) for name, address in ADDRESSES.items()),
    ]  # fmt: skip

    def ready(node: BootedNode) -> bool:
        unit = "k3s.service" if node.plan.name == "control-plane" else (
            "raya-host-key-publish.service")  # fmt: skip
        return node.job_done(unit) is not None

    with booted(plans, ready, DEADLINE, probe=_probe(secrets)) as found:
        yield found


@pytest.fixture(
    scope="module", params=list(ADDRESSES), ids=["lease", "lease with a metadata route"]
)
def node(nodes: dict[str, BootedNode], request: pytest.FixtureRequest) -> BootedNode:
    found: BootedNode = nodes[request.param]
    return found


def _config(node: BootedNode) -> dict[str, Any]:
    """What the stand-in k3s saw of its merged config, as it logged it."""
    (line,) = [e.message for e in node.logged("k3s") if e.message.startswith("config: ")]
    found: dict[str, Any] = json.loads(line.removeprefix("config: "))
    return found


def _host_key(node: BootedNode) -> str:
    """The ed25519 host key in the node's /etc/ssh, `<algorithm> <blob>`."""
    return " ".join((node.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2])


def test_the_private_address_comes_from_hetzners_dhcp(
    nodes: dict[str, BootedNode], node: BootedNode
) -> None:
    """enp7s0 holds the address Hetzner's DHCP handed to the server's NIC, as a /32, and the
    routes every node has (the gateway on-link, the private range through it), whatever else
    the lease offers; the default route and the way to the metadata service stay on the
    public side; network-online.target waited for the lease."""
    name = node.plan.name
    address = ADDRESSES[name]
    (link,) = [link for link in node.state["addresses"] if link["ifname"] == "enp7s0"]
    assert [(a["local"], a["prefixlen"]) for a in link["addr_info"]] == [(address, 32)]
    assert link["mtu"] == 1450
    assert node.state["connection"] == ["enp7s0", "100 (connected)"]
    private = {(r["dst"], r.get("gateway")) for r in node.state["routes"] if r["dev"] == "enp7s0"}
    assert private == {("10.0.0.1", None), ("10.0.0.0/8", "10.0.0.1")}
    (route,) = node.state["route_to_control_plane"]
    assert (route["gateway"], route["dev"]) == ("10.0.0.1", "enp7s0")
    (route,) = node.state["route_to_metadata"]
    assert route["dev"] == "enp1s0", route
    online = node.job_done("network-online.target")
    discovered = node.job_done("raya-node-address.service")
    assert online and discovered and online.at <= discovered.at
    dhcp = [e.message for e in node.logged("NetworkManager") if "dhcp4 (enp7s0)" in e.message]
    assert any(m.endswith(f"state changed new lease, address={address}") for m in dhcp), dhcp
    # Hetzner's side: the lease went to the server's private NIC (its MAC), asked for under
    # the server's name, on its link only; what it offered.
    log = node.state["private_dhcp"]
    index = list(nodes).index(name)
    # (A retransmitted request may be answered twice: every answer must be the same.)
    acks = {line.split(" ", 1)[1] for line in log if "DHCPACK" in line}
    assert acks == {f"DHCPACK(v{index}) {address} {MACS[name]} {name}"}, log
    routes = [("10.0.0.1/32", "0.0.0.0"), ("10.0.0.0/16", "10.0.0.1")]
    if node.plan.metadata_route:
        routes.append(("169.254.169.254/32", "10.0.0.1"))
    offered = _classless_routes(routes)
    # dnsmasq logs the option's size and its first 14 bytes.
    sent = f"sent size: {len(offered)} option:121 classless-static-route  {offered[:14].hex(':')}"
    options = {line.split(" ", 1)[1] for line in log if "option:121" in line}
    assert options == {f"{sent}..."}, log
    assert not nodes["control-plane"].state["private_dhcp"]  # a planned node asks nothing


def test_its_name_and_address_are_read_at_boot_and_given_to_k3s(node: BootedNode) -> None:
    """The config names neither: the node's name is its server's, from the metadata service,
    its node-ip the leased address; k3s starts only once both are known."""
    name, address = node.plan.name, ADDRESSES[node.plan.name]
    rendered = ignition_files(node.plan.ignition)
    assert name.encode() not in node.plan.ignition and address.encode() not in node.plan.ignition
    assert not [path for path in rendered if path.startswith("/etc/ssh/")]  # no host key given
    assert "/etc/rancher/node/password" not in rendered  # nor a node password
    dropin = node.root / "etc/rancher/k3s/config.yaml.d/50-node-address.yaml"
    assert dropin.read_text() == f'node-name: "{name}"\nnode-ip: "{address}"\n'
    assert any(e.message == f"node-name: {name}, node-ip: {address}"
               for e in node.logged("raya-node-address"))  # fmt: skip
    config = _config(node)
    assert (config["node-name"], config["node-ip"]) == (name, address)
    assert config["node-external-ip"] == node.state["public_address"]
    discovered = node.job_done("raya-node-address.service")
    k3s = node.job_done("k3s-agent.service")
    assert discovered and k3s and discovered.at <= k3s.at
    assert any(e.message == f"enp7s0 addresses at start: {address}/32"
               for e in node.logged("k3s"))  # fmt: skip


def test_it_joins_with_the_agent_token_and_k3s_makes_its_node_password(
    nodes: dict[str, BootedNode], node: BootedNode, secrets: ClusterSecrets
) -> None:
    name = node.plan.name
    log = [e.message for e in node.logged("k3s")]
    token = agent_token(secrets.server_ca.cert_pem, secrets.agent_secret)
    assert f"token sha256: {_sha256(token)}" in log
    assert f"joined {API}: welcome to /v1-k3s/config from control-plane" in log
    assert "node password generated in /etc/rancher/node/password" in log
    assert (node.root / "etc/rancher/node/password").stat().st_mode & 0o777 == 0o600
    server = [e.message for e in nodes["control-plane"].logged("k3s")]
    assert f"kubelet certificate issued to system:node:{name}" in server
    assert f"Successfully registered node {name}" in log
    assert node.state["failed"] == []
    assert node.state["active"]["k3s-agent.service"] == "active"


def test_it_publishes_the_host_key_sshd_keygen_made_on_its_own_node(
    nodes: dict[str, BootedNode], node: BootedNode
) -> None:
    """The Node object, read over the API as `raya ssh` reads it, carries the ed25519 key of
    the node's /etc/ssh, written by the kubelet's user; the pool's labels and taints and the
    server's provider ID came with the kubelet's registration."""
    name = node.plan.name
    published = node.state.get("node_object")
    assert published, "no Node object with a published key"
    assert published["metadata"]["annotations"] == {HOST_KEY_ANNOTATION: _host_key(node)}
    assert _host_key(node).startswith("ssh-ed25519 ")
    assert published["metadata"]["labels"]["tier"] == "burst"
    assert published["spec"]["providerID"] == f"hcloud://{node.state['server_id']}"
    assert {"key": "burst", "value": "yes", "effect": "PreferNoSchedule"} in (
        published["spec"]["taints"]
    )
    server = [e.message for e in nodes["control-plane"].logged("k3s")]
    assert f"api: system:node:{name} PATCH /api/v1/nodes/{name}: 200" in server
    keygen = node.job_done("sshd-keygen@ed25519.service")
    k3s = node.job_done("k3s-agent.service")
    publish = node.job_done("raya-host-key-publish.service")
    assert keygen and k3s and publish and max(keygen.at, k3s.at) <= publish.at
    # Each node its own key: one config, no key in it.
    assert len({_host_key(nodes[other]) for other in ADDRESSES}) == len(ADDRESSES)


def test_its_kubelet_may_annotate_no_other_node(
    nodes: dict[str, BootedNode], node: BootedNode
) -> None:
    """NodeRestriction, with the very credentials the node publishes with."""
    name = node.plan.name
    assert node.state["other_annotated"].splitlines()[-1] == (
        f'Error from server (Forbidden): nodes "{OTHER}" is forbidden: node "{name}" is not '
        f'allowed to modify node "{OTHER}"'
    )
    server = [e.message for e in nodes["control-plane"].logged("k3s")]
    assert f"api: system:node:{name} PATCH /api/v1/nodes/{OTHER}: 403" in server


def test_raya_ssh_accepts_the_published_key_and_refuses_another(node: BootedNode) -> None:
    """The real ssh client with `raya ssh`'s known_hosts and options, against the running
    node's sshd: with the published key it goes on to authenticate (and is refused a user,
    offering none); with any other key it stops at the host key."""
    entry = node.state["entry"]
    assert entry == {"dnsName": node.plan.name, "ipv4": node.state["public_address"],
                     "hostKey": _host_key(node)}  # fmt: skip
    code, said = node.state["ssh_published"]
    assert code == 255 and "Permission denied" in said, said
    assert "Host key verification failed" not in said
    code, said = node.state["ssh_another"]
    assert code == 255 and "Host key verification failed." in said, said
    assert "Permission denied" not in said


def _classless_routes(routes: list[tuple[str, str]]) -> bytes:
    """DHCP option 121's value (RFC 3442): each destination's prefix length, the significant
    octets of its address, then its router."""
    value = b""
    for destination, router in routes:
        network = ipaddress.IPv4Network(destination)
        octets = (network.prefixlen + 7) // 8
        value += bytes([network.prefixlen]) + network.network_address.packed[:octets]
        value += ipaddress.IPv4Address(router).packed
    return value


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
