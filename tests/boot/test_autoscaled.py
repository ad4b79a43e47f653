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
from collections.abc import Iterator
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
# The autoscaler's name for the server: its node group and a random number in hex
# (cluster-autoscaler/cloudprovider/hetzner, hetzner_node_group.go, `newNodeName`).
SERVER = "raya-burst-5f1d2e3c4b5a6978"
# The address Hetzner picked for it in the pool's subnet (the config names none).
ADDRESS = ipaddress.IPv4Address("10.0.16.7")
API = "https://10.0.1.10:6443"  # the control plane's API, seen from Hetzner's side
OTHER = "raya-burst-00aa"  # another node of the pool, registered by the admin
DEADLINE = 120.0


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


def _probe(secrets: ClusterSecrets) -> Any:
    def probe(hetzner: Hetzner, nodes: dict[str, BootedNode]) -> None:
        """While the nodes run: Hetzner's cloud controller gives the Node its addresses (the
        server's, by its provider ID), the admin registers another node of the pool, the
        node's kubelet is asked to annotate that one, the Node is read as `raya ssh` reads
        it, and ssh is run with its pinning."""
        from kubernetes.client import CoreV1Api, V1Node, V1ObjectMeta

        node = nodes[SERVER]
        if node.job_done("raya-host-key-publish.service") is None:
            return  # nothing published: the tests say what is missing
        admin = _admin(secrets)
        addresses = [{"type": "InternalIP", "address": str(ADDRESS)},
                     {"type": "ExternalIP", "address": node.state["public_address"]},
                     {"type": "Hostname", "address": SERVER}]  # fmt: skip
        with in_namespace(hetzner.namespace):
            api = kubeconfig.api_client(admin)
            try:
                core = CoreV1Api(api)
                core.patch_node_status(SERVER, {"status": {"addresses": addresses}},
                                       _content_type=MERGE_PATCH)  # fmt: skip
                core.create_node(V1Node(metadata=V1ObjectMeta(name=OTHER)))
            finally:
                api.close()
            node.state["node_object"] = _node_object(admin, SERVER)
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
    plans = [
        NodePlan("control-plane", control_plane.ignition, control_plane.node.private_ip,
                 volume=VolumePlan(VOLUME_ID)),
        NodePlan(SERVER, render_pool(cluster, POOL, secrets).ignition, ADDRESS, dhcp=True),
    ]  # fmt: skip

    def ready(node: BootedNode) -> bool:
        unit = "k3s.service" if node.plan.name == "control-plane" else (
            "raya-host-key-publish.service")  # fmt: skip
        return node.job_done(unit) is not None

    with booted(plans, ready, DEADLINE, probe=_probe(secrets)) as found:
        yield found


@pytest.fixture(scope="module")
def node(nodes: dict[str, BootedNode]) -> BootedNode:
    return nodes[SERVER]


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
    """enp7s0 holds the address Hetzner's DHCP handed to the server's NIC, as a /32 with the
    routes of every node (the gateway on-link, the private range through it); the default
    route stays on the public side; network-online.target waited for the lease."""
    (link,) = [link for link in node.state["addresses"] if link["ifname"] == "enp7s0"]
    assert [(a["local"], a["prefixlen"]) for a in link["addr_info"]] == [("10.0.16.7", 32)]
    assert link["mtu"] == 1450
    assert node.state["connection"] == ["enp7s0", "100 (connected)"]
    routes = {(r["dst"], r.get("gateway"), r["dev"]) for r in node.state["routes"]}
    assert {("10.0.0.1", None, "enp7s0"), ("10.0.0.0/8", "10.0.0.1", "enp7s0")} <= routes
    assert not [r for r in node.state["routes"] if r["dst"] == "default" and r["dev"] == "enp7s0"]
    (route,) = node.state["route_to_control_plane"]
    assert (route["gateway"], route["dev"]) == ("10.0.0.1", "enp7s0")
    online, address = node.job_done("network-online.target"), node.job_done(
        "raya-node-address.service")  # fmt: skip
    assert online and address and online.at <= address.at
    dhcp = [e.message for e in node.logged("NetworkManager") if "dhcp4 (enp7s0)" in e.message]
    assert any(m.endswith("state changed new lease, address=10.0.16.7") for m in dhcp), dhcp
    # Hetzner's side: the lease went to the server's private NIC (its MAC), on its link only.
    mac = "02:00:00:00:02:01"
    acks = [line.split(" ", 1)[1] for line in node.state["private_dhcp"] if "DHCPACK" in line]
    assert acks == [f"DHCPACK(v1) 10.0.16.7 {mac} {SERVER}"], node.state["private_dhcp"]
    assert not nodes["control-plane"].state["private_dhcp"]  # a planned node asks nothing


def test_its_name_and_address_are_read_at_boot_and_given_to_k3s(node: BootedNode) -> None:
    """The config names neither: the node's name is its server's, from the metadata service,
    its node-ip the leased address; k3s starts only once both are known."""
    rendered = ignition_files(node.plan.ignition)
    assert SERVER.encode() not in node.plan.ignition and b"10.0.16.7" not in node.plan.ignition
    assert not [path for path in rendered if path.startswith("/etc/ssh/")]  # no host key given
    assert "/etc/rancher/node/password" not in rendered  # nor a node password
    dropin = node.root / "etc/rancher/k3s/config.yaml.d/50-node-address.yaml"
    assert dropin.read_text() == f'node-name: "{SERVER}"\nnode-ip: "10.0.16.7"\n'
    assert any(e.message == f"node-name: {SERVER}, node-ip: 10.0.16.7"
               for e in node.logged("raya-node-address"))  # fmt: skip
    config = _config(node)
    assert (config["node-name"], config["node-ip"]) == (SERVER, "10.0.16.7")
    assert config["node-external-ip"] == node.state["public_address"]
    address, k3s = node.job_done("raya-node-address.service"), node.job_done("k3s-agent.service")
    assert address and k3s and address.at <= k3s.at
    assert any(e.message == "enp7s0 addresses at start: 10.0.16.7/32" for e in node.logged("k3s"))


def test_it_joins_with_the_agent_token_and_k3s_makes_its_node_password(
    nodes: dict[str, BootedNode], node: BootedNode, secrets: ClusterSecrets
) -> None:
    log = [e.message for e in node.logged("k3s")]
    token = agent_token(secrets.server_ca.cert_pem, secrets.agent_secret)
    assert f"token sha256: {_sha256(token)}" in log
    assert f"joined {API}: welcome to /v1-k3s/config from control-plane" in log
    assert "node password generated in /etc/rancher/node/password" in log
    assert (node.root / "etc/rancher/node/password").stat().st_mode & 0o777 == 0o600
    server = [e.message for e in nodes["control-plane"].logged("k3s")]
    assert f"kubelet certificate issued to system:node:{SERVER}" in server
    assert f"Successfully registered node {SERVER}" in log
    assert node.state["failed"] == []
    assert node.state["active"]["k3s-agent.service"] == "active"


def test_it_publishes_the_host_key_sshd_keygen_made_on_its_own_node(
    nodes: dict[str, BootedNode], node: BootedNode
) -> None:
    """The Node object, read over the API as `raya ssh` reads it, carries the ed25519 key of
    the node's /etc/ssh, written by the kubelet's user; the pool's labels and taints and the
    server's provider ID came with the kubelet's registration."""
    assert node.job_done("sshd-keygen@ed25519.service") is not None
    published = node.state["node_object"]
    assert published["metadata"]["annotations"] == {HOST_KEY_ANNOTATION: _host_key(node)}
    assert _host_key(node).startswith("ssh-ed25519 ")
    assert published["metadata"]["labels"]["tier"] == "burst"
    assert published["spec"]["providerID"] == f"hcloud://{node.state['server_id']}"
    assert {"key": "burst", "value": "yes", "effect": "PreferNoSchedule"} in (
        published["spec"]["taints"]
    )
    server = [e.message for e in nodes["control-plane"].logged("k3s")]
    assert f"api: system:node:{SERVER} PATCH /api/v1/nodes/{SERVER}: 200" in server
    keygen, k3s = node.job_done("sshd-keygen@ed25519.service"), node.job_done("k3s-agent.service")
    publish = node.job_done("raya-host-key-publish.service")
    assert keygen and k3s and publish and max(keygen.at, k3s.at) <= publish.at


def test_its_kubelet_may_annotate_no_other_node(
    nodes: dict[str, BootedNode], node: BootedNode
) -> None:
    """NodeRestriction, with the very credentials the node publishes with."""
    assert node.state["other_annotated"].splitlines()[-1] == (
        f'Error from server (Forbidden): nodes "{OTHER}" is forbidden: node "{SERVER}" is not '
        f'allowed to modify node "{OTHER}"'
    )
    server = [e.message for e in nodes["control-plane"].logged("k3s")]
    assert f"api: system:node:{SERVER} PATCH /api/v1/nodes/{OTHER}: 403" in server


def test_raya_ssh_accepts_the_published_key_and_refuses_another(node: BootedNode) -> None:
    """The real ssh client with `raya ssh`'s known_hosts and options, against the running
    node's sshd: with the published key it goes on to authenticate (and is refused a user,
    offering none); with any other key it stops at the host key."""
    entry = node.state["entry"]
    assert entry == {"dnsName": SERVER, "ipv4": node.state["public_address"],
                     "hostKey": _host_key(node)}  # fmt: skip
    code, said = node.state["ssh_published"]
    assert code == 255 and "Permission denied" in said, said
    assert "Host key verification failed" not in said
    code, said = node.state["ssh_another"]
    assert code == 255 and "Host key verification failed." in said, said
    assert "Permission denied" not in said


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
