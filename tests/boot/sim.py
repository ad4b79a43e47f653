"""Booting rendered node configs under systemd-nspawn on a simulated Hetzner network.

A Debian root (debootstrap, cached) stands in for FCOS' userland; each node gets an overlay
of it into which the real Ignition writes its config, then boots it with real systemd and
NetworkManager. One network namespace plays Hetzner: the private network's gateway
10.0.0.1 *routing* between the nodes (a /32 route per node, no bridge: Hetzner's networks
are layer 3), a public side on a documentation range with DHCP (dnsmasq), and the metadata
service at 169.254.169.254, answering on the public side only. A node whose config takes its
private address from Hetzner's DHCP (an autoscaled pool's) gets it from a dnsmasq on its own
private link. Each node has a namespace of its own, linked only to Hetzner's:
nothing reaches any other network. The nspawn flags are those this machine kind needs
(see docs/nodes.md, "Boot test").
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal

from raya.defaults import GITHUB_URL
from raya.model.project import EXAMPLE_KEYS
from raya.nodes.github_keys import load_keys_file
from raya.nodes.render import K3S_BINARY_REAL, PRIVATE_INTERFACE, VOLUME_LABEL, volume_device
from tests.boot.balancer import Balancer
from tests.nodes.tools import (
    SELINUX_STUB,
    apply_ignition,
    device_files,
    fcos_layout,
    probe_device,
)
from tests.support import REPO, Reply, http_server, require_tool, routes

# What the Debian root holds besides minbase: what FCOS has that the configs rely on, and
# python3 for the stand-in k3s. libpam-systemd: without it NetworkManager's polkit
# dependency stays unconfigured.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "network-manager",
    "libpam-systemd",
    "curl",
    "iproute2",
    "python3",
    "nftables",  # the metadata guard's rule set (raya-metadata-guard.service)
    "openssh-server",  # what "reachable over SSH" is checked against
)
ROOT_CACHE = Path("/var/cache/raya-boot-root")
PUBLIC_INTERFACE = "enp1s0"  # Hetzner's public NIC on FCOS
PUBLIC_NETWORK = ipaddress.IPv4Network("203.0.113.0/24")  # documentation range (RFC 5737)
PUBLIC_GATEWAY = PUBLIC_NETWORK.network_address + 1
METADATA_ADDRESS = "169.254.169.254"
METADATA_PATH = "/hetzner/v1/metadata/public-ipv4"
INSTANCE_ID_PATH = "/hetzner/v1/metadata/instance-id"  # the server's id, as text
HOSTNAME_PATH = "/hetzner/v1/metadata/hostname"  # the server's name, as text
SERVER_IDS = 108_500_000  # the simulated servers' ids: this plus the node's index
# Where the simulated network serves GitHub's key pages (GitHub itself is out of reach).
SIM_GITHUB = f"http://{METADATA_ADDRESS}/github"
EXAMPLE_USERS = load_keys_file(EXAMPLE_KEYS)
CLONE_NEWNET = 0x40000000
# The private network: the example's networkRange; Hetzner's gateway is its first address.
PRIVATE_NETWORK = ipaddress.IPv4Network("10.0.0.0/16")
PRIVATE_GATEWAY = PRIVATE_NETWORK.network_address + 1
PRIVATE_RULES, LOCAL_RULE = 10, 100  # Hetzner's namespace: its policy rules' priorities

# How the private NIC arrives; "none": no private network at all (raya:network: public).
Attachment = Literal["present", "late-link", "hot-plug", "none"]
MiB = 1024 * 1024
FOREIGN_LABEL = "someone-else"


def _run(*command: str, timeout: float = 60) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
    return result.stdout


# --- the Debian root -------------------------------------------------------------------


def _host_codename() -> str:
    release = Path("/etc/os-release").read_text()
    match = re.search(r"^VERSION_CODENAME=(\S+)$", release, re.MULTILINE)
    if not match:
        raise RuntimeError("/etc/os-release names no VERSION_CODENAME")
    return match[1].strip('"')


def debian_mirror(suite: str, apt: Path = Path("/etc/apt")) -> str:
    """The mirror apt uses here for `suite` (sources.list or deb822 .sources files)."""
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    for path in [p for p in files if p.is_file()]:
        for line in path.read_text().splitlines():
            fields = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
            if len(fields) >= 3 and fields[0] == "deb" and fields[2] == suite:
                return fields[1]
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            entry = {
                key.strip(): value.split()
                for key, _, value in (
                    line.partition(":") for line in stanza.splitlines() if ":" in line
                )
                if not key.startswith("#")
            }
            if (
                "deb" in entry.get("Types", [])
                and suite in entry.get("Suites", [])
                and entry.get("Enabled", ["yes"]) != ["no"]
                and entry.get("URIs")
            ):
                return entry["URIs"][0]
    raise RuntimeError(f"no Debian mirror for {suite} in {apt}/sources.list(.d)")


def debian_root() -> Path:
    """A Debian root of the host's release with PACKAGES, built once and kept under
    ROOT_CACHE, keyed by release and package list; nodes only ever overlay it."""
    suite = _host_codename()
    key = hashlib.sha256(json.dumps([suite, PACKAGES]).encode()).hexdigest()[:16]
    root = ROOT_CACHE / f"{suite}-{key}"
    ready = root / ".raya-root-complete"
    if ready.exists():
        return root
    ROOT_CACHE.mkdir(parents=True, exist_ok=True)
    with open(ROOT_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return root
        building = root.with_name(root.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        _run(
            require_tool("debootstrap"),
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            suite,
            str(building),
            debian_mirror(suite),
            timeout=1800,
        )
        # Persistent journal, read after the node stops.
        (building / "var/log/journal").mkdir(parents=True, exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
        building.rename(root)
        ready.touch()
    return root


# --- namespaces --------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_namespace(name: str) -> Iterator[None]:
    """This thread in network namespace `name`: sockets made meanwhile stay in it."""
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{name}") as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
        try:
            yield
        finally:
            if _libc.setns(home.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")


def ip(namespace: str, *arguments: str) -> str:
    return _run(require_tool("ip"), "-n", namespace, *arguments)


@dataclass(frozen=True)
class VolumePlan:
    """The control plane's Hetzner volume: a loop device of its own, attached (its device
    node and by-id link made in the node's /dev, as udev would) at boot or later."""

    id: str
    attach_after: float | None = 0.0  # seconds after launch; 0: present at boot; None: never
    foreign: bool = False  # holds another ext4 filesystem (FOREIGN_LABEL) from the start
    # Files (path on the volume, contents) of an earlier server: the volume then holds raya's
    # ext4 with them from the start, as a kept volume does when its server is re-created.
    holding: tuple[tuple[str, bytes], ...] = ()


@dataclass
class NodePlan:
    """One node of a scenario: its name and config, how its private NIC arrives, its volume
    (the control plane's), and how long the metadata service and GitHub fail at first."""

    name: str
    ignition: bytes
    private_ip: ipaddress.IPv4Address
    attachment: Attachment = "present"
    delay: float = 0.0  # seconds after launch, for late-link and hot-plug
    metadata_unavailable_for: float = 0.0  # seconds of 503 from the metadata service
    held: bool = False  # launched by the scenario's step (Fleet.start), not at once
    github_unavailable_for: float = 0.0  # seconds of 503 from GitHub's key pages
    volume: VolumePlan | None = None
    # The private address comes from Hetzner's DHCP (an autoscaled node's config has none):
    # `private_ip` is then the address Hetzner picked for the server.
    dhcp: bool = False
    # Hetzner's DHCP also offers a route to the metadata service through the private gateway,
    # where it never answers: what 1 fresh server in 10 got in August 2026
    # (hcloud-k8s/terraform-hcloud-kubernetes#490, kube-hetzner/terraform-hcloud-kube-hetzner#2268).
    metadata_route: bool = False


@dataclass
class SimVolume:
    """A volume's loop device and backing file, and its digest before the boot."""

    loop: str
    backing: Path
    before: str

    def digest(self) -> str:
        return hashlib.sha256(self.backing.read_bytes()).hexdigest()

    def probe(self) -> dict[str, str]:
        return probe_device(self.loop)

    def files(self) -> dict[str, bytes]:
        return device_files(self.loop)


def make_volume(plan: VolumePlan, stack: contextlib.ExitStack) -> SimVolume:
    """A 64 MiB volume on a loop device: empty, ext4 of another label if `foreign`, raya's
    ext4 with the files it is `holding`."""
    folder = Path(tempfile.mkdtemp(prefix="raya-boot-volume-"))
    stack.callback(shutil.rmtree, folder, ignore_errors=True)
    backing = folder / "volume.img"
    with backing.open("wb") as handle:
        handle.truncate(64 * MiB)
    loop = _run(require_tool("losetup"), "--find", "--show", str(backing)).strip()
    stack.callback(_run, "losetup", "--detach", loop)
    if plan.foreign:
        _run(require_tool("mkfs.ext4"), "-q", "-F", "-L", FOREIGN_LABEL, loop)
    if plan.holding:
        tree = folder / "tree"
        for path, data in plan.holding:
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_bytes(data)
        _run(require_tool("mkfs.ext4"), "-q", "-F", "-L", VOLUME_LABEL, "-d", str(tree), loop)
    return SimVolume(loop, backing, hashlib.sha256(backing.read_bytes()).hexdigest())


class Hetzner:
    """The Hetzner namespace: private gateway (routing), public DHCP, metadata service."""

    def __init__(self, tag: str, stack: contextlib.ExitStack) -> None:
        self.namespace = f"raya-{tag}-hz"
        self.metadata_log: list[tuple[float, str, int]] = []
        self.github_log: list[tuple[float, str, int]] = []
        self._unavailable_until: dict[str, float] = {}
        self._github_unavailable_until: dict[str, float] = {}
        self._leases: list[str] = []
        self._hostnames: dict[str, str] = {}  # public address -> the server's name
        self.private_dhcp_log = Path(tempfile.mkdtemp(prefix="raya-boot-dhcp-")) / "dnsmasq.log"
        stack.callback(shutil.rmtree, self.private_dhcp_log.parent, ignore_errors=True)
        self._stack = stack
        _run(require_tool("ip"), "netns", "add", self.namespace)
        stack.callback(_run, "ip", "netns", "delete", self.namespace)
        ip(self.namespace, "link", "set", "lo", "up")
        ip(self.namespace, "address", "add", f"{METADATA_ADDRESS}/32", "dev", "lo")
        _run("ip", "netns", "exec", self.namespace, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        ip(self.namespace, "link", "add", "pub", "type", "bridge")
        ip(self.namespace, "address", "add", f"{PUBLIC_GATEWAY}/24", "dev", "pub")
        ip(self.namespace, "link", "set", "pub", "up")
        # The public side does not lead into the private network (on Hetzner it leads to the
        # internet): a node without its private NIC must not reach its peers through it.
        ip(self.namespace, "rule", "add", "iif", "pub", "to", "10.0.0.0/8", "unreachable")
        # The local table's rule after those of PRIVATE_RULES, so that they can refuse an
        # address of this namespace's own (the metadata service's).
        ip(self.namespace, "rule", "add", "pref", str(LOCAL_RULE), "lookup", "local")
        ip(self.namespace, "rule", "del", "pref", "0")
        with in_namespace(self.namespace):
            stack.enter_context(
                http_server(
                    routes(
                        {
                            METADATA_PATH: self._metadata,
                            INSTANCE_ID_PATH: self._metadata,
                            HOSTNAME_PATH: self._metadata,
                            **{path: self._github(page) for path, page in github_pages().items()},
                        }
                    ),
                    address=(METADATA_ADDRESS, 80),
                )
            )

    def _metadata(self, request: BaseHTTPRequestHandler) -> Reply:
        """The public address, the server id or the server's name (a node's server is named
        as its plan) of the asking server (known by its public address, as Hetzner knows it
        by the server), 503 while it is unavailable."""
        client = request.client_address[0]
        status = 503 if time.monotonic() < self._unavailable_until.get(client, 0) else 200
        self.metadata_log.append((time.monotonic(), client, status))
        if status != 200:
            return (status, b"unavailable")
        if request.path == HOSTNAME_PATH:
            return (200, self._hostnames[client].encode())
        if request.path == INSTANCE_ID_PATH:
            index = int(ipaddress.IPv4Address(client)) - int(self.public_address(0))
            return (200, str(self.server_id(index)).encode())
        return (200, client.encode())

    def _github(self, page: bytes) -> Callable[[BaseHTTPRequestHandler], Reply]:
        def respond(request: BaseHTTPRequestHandler) -> Reply:
            client = request.client_address[0]
            down = time.monotonic() < self._github_unavailable_until.get(client, 0)
            self.github_log.append((time.monotonic(), client, 503 if down else 200))
            return (503, b"unavailable") if down else (200, page)

        return respond

    def ssh_banner(self, address: ipaddress.IPv4Address) -> str:
        """The first line a node's SSH port sends, as seen from the internet side ('' when
        nothing answers)."""
        with in_namespace(self.namespace):
            try:
                with socket.create_connection((str(address), 22), timeout=5) as connection:
                    return connection.recv(256).decode(errors="replace").splitlines()[0]
            except (OSError, IndexError):
                return ""

    def public_address(self, index: int) -> ipaddress.IPv4Address:
        return PUBLIC_GATEWAY + 10 + index

    def server_id(self, index: int) -> int:
        return SERVER_IDS + index

    def attach_public(
        self,
        namespace: str,
        index: int,
        unavailable_until: float,
        github_until: float,
        hostname: str,
    ) -> None:
        """The node's public NIC, up before boot (else NetworkManager's first DHCP request
        may be lost), with a fixed lease."""
        mac = f"02:00:00:00:01:{index:02x}"
        ip(self.namespace, "link", "add", f"p{index}", "type", "veth", "peer", "name", f"pn{index}")
        ip(self.namespace, "link", "set", f"p{index}", "master", "pub", "up")
        ip(self.namespace, "link", "set", f"pn{index}", "netns", namespace)
        ip(namespace, "link", "set", f"pn{index}", "name", PUBLIC_INTERFACE, "address", mac)
        ip(namespace, "link", "set", PUBLIC_INTERFACE, "up")
        self._leases.append(f"{mac},{self.public_address(index)}")
        self._hostnames[str(self.public_address(index))] = hostname
        self._unavailable_until[str(self.public_address(index))] = unavailable_until
        self._github_unavailable_until[str(self.public_address(index))] = github_until

    def start_dhcp(self, names: Mapping[str, int] | None = None) -> None:
        """DHCP on the public side; with `names` (DNS name -> the index of the node whose
        public address it holds), DNS too, answering those names alone, as the cluster's
        public zone does (what DHCP hands out as the resolver: dnsmasq's own address)."""
        dns = (
            ["--port=53", "--no-resolv", "--no-hosts",
             *(f"--address=/{name}/{self.public_address(index)}"
               for name, index in names.items())]
            if names
            else ["--port=0"]
        )  # fmt: skip
        dnsmasq = subprocess.Popen(
            [
                "ip", "netns", "exec", self.namespace,
                require_tool("dnsmasq"),
                "--keep-in-foreground", "--conf-file=/dev/null", *dns, "--no-ping",
                "--interface=pub", "--bind-interfaces", "--leasefile-ro", "--pid-file",
                "--dhcp-authoritative",
                f"--dhcp-range={PUBLIC_GATEWAY + 200},{PUBLIC_GATEWAY + 250},255.255.255.0,1h",
                *(f"--dhcp-host={lease}" for lease in self._leases),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._stack.callback(_stop_process, dnsmasq)

    def prepare_private(self, namespace: str, index: int, attachment: Attachment) -> None:
        """The node's private NIC: in its namespace as enp7s0 unless it is to be hot-plugged;
        the gateway's end down until connect_private for a late link."""
        ip(self.namespace, "link", "add", f"v{index}", "mtu", "1450", "type", "veth", "peer",
           "name", f"vn{index}", "mtu", "1450", "address", self.private_mac(index))  # fmt: skip
        ip(self.namespace, "address", "add", f"{PRIVATE_GATEWAY}/32", "dev", f"v{index}")
        # The metadata service answers on the public side only: through the private gateway
        # it never does (the gateway drops what it is sent there).
        ip(self.namespace, "rule", "add", "pref", str(PRIVATE_RULES), "iif", f"v{index}",
           "to", f"{METADATA_ADDRESS}/32", "blackhole")  # fmt: skip
        if attachment != "hot-plug":
            ip(self.namespace, "link", "set", f"vn{index}", "netns", namespace)
            ip(namespace, "link", "set", f"vn{index}", "name", PRIVATE_INTERFACE)

    def private_mac(self, index: int) -> str:
        return f"02:00:00:00:02:{index:02x}"

    def serve_private_dhcp(
        self, index: int, address: ipaddress.IPv4Address, metadata_route: bool
    ) -> None:
        """Hetzner's DHCP on the node's private NIC, answering its MAC alone with the address
        Hetzner picked, as a /32 (Hetzner's networks are layer 3), the gateway as the router
        and, as classless static routes (RFC 3442, option 121), the gateway on-link and the
        network through it: the routes of Hetzner's networks documentation ("Architecture",
        the example routes of a cloud server); with `metadata_route`, also the metadata
        service's /32 through the gateway (NodePlan.metadata_route). One dnsmasq bound to this
        NIC only (a single interface: SO_BINDTODEVICE), its leases in `private_dhcp_log`."""
        routes = [f"{PRIVATE_GATEWAY}/32", "0.0.0.0", str(PRIVATE_NETWORK), str(PRIVATE_GATEWAY)]
        if metadata_route:
            routes += [f"{METADATA_ADDRESS}/32", str(PRIVATE_GATEWAY)]
        dnsmasq = subprocess.Popen(
            [
                "ip", "netns", "exec", self.namespace,
                require_tool("dnsmasq"),
                "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--no-ping",
                f"--interface=v{index}", "--bind-interfaces", "--leasefile-ro", "--pid-file",
                "--dhcp-authoritative", "--log-dhcp", f"--log-facility={self.private_dhcp_log}",
                # The gateway's own address on the NIC is 10.0.0.1/32: a context as wide as the
                # network matches it; only the one host entry is ever handed out.
                f"--dhcp-range={PRIVATE_NETWORK.network_address},static,{PRIVATE_NETWORK.netmask}",
                f"--dhcp-host={self.private_mac(index)},{address}",
                "--dhcp-option=option:netmask,255.255.255.255",
                f"--dhcp-option=option:router,{PRIVATE_GATEWAY}",
                f"--dhcp-option=121,{','.join(routes)}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._stack.callback(_stop_process, dnsmasq)

    def private_dhcp(self, index: int) -> list[str]:
        """What Hetzner's DHCP on the node's private NIC logged, without dnsmasq's prefix."""
        if not self.private_dhcp_log.exists():
            return []
        lines = [line.split(": ", 1)[-1] for line in self.private_dhcp_log.read_text().splitlines()]
        # A transaction's lines (the options sent, too) begin with its id.
        ids = {line.split()[0] for line in lines if f"(v{index})" in line}
        return [line for line in lines if line.split()[:1] and line.split()[0] in ids]

    def cut_private(self, index: int) -> None:
        """The node's host is gone, as far as the private network can tell."""
        ip(self.namespace, "link", "set", f"v{index}", "down")

    def balance(self, balancer: Balancer) -> None:
        """Run the load balancer stand-in on its private address, inside this namespace."""
        ip(self.namespace, "address", "add", f"{balancer.address}/32", "dev", "lo")
        with in_namespace(self.namespace):
            self._stack.enter_context(balancer.running())

    def connect_private(
        self, namespace: str, index: int, address: ipaddress.IPv4Address, attachment: Attachment
    ) -> None:
        """Give the node's private NIC its link (and hot-plug it, if so planned); route the
        node's address to it, as Hetzner's gateway does."""
        if attachment == "hot-plug":
            ip(self.namespace, "link", "set", f"vn{index}", "netns", namespace)
            ip(namespace, "link", "set", f"vn{index}", "name", PRIVATE_INTERFACE)
        ip(self.namespace, "link", "set", f"v{index}", "up")
        ip(self.namespace, "route", "add", f"{address}/32", "dev", f"v{index}")


def _stop_process(process: subprocess.Popen[Any], grace: float = 30) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- nodes -------------------------------------------------------------------------------

JOB_DONE = "39f53479d3a045ac8e11786248231fbf"  # systemd's "job finished" catalogue entry


@dataclass
class Event:
    at: float  # seconds after the node's launch
    message: str
    fields: dict[str, Any]


@dataclass
class BootedNode:
    plan: NodePlan
    namespace: str
    folder: Path
    launched: float = 0.0
    process: subprocess.Popen[bytes] | None = None
    state: dict[str, Any] = field(default_factory=dict)
    volume: SimVolume | None = None

    @property
    def root(self) -> Path:
        return self.folder / "merged"

    def journal(self) -> list[Event]:
        output = _run(
            require_tool("journalctl"), "-D", str(self.root / "var/log/journal"),
            "-o", "json", "--no-pager",
        )  # fmt: skip
        events = []
        for line in output.splitlines():
            entry = json.loads(line)
            message = entry.get("MESSAGE")
            if not isinstance(message, str):
                continue
            at = int(entry["__MONOTONIC_TIMESTAMP"]) / 1e6 - self.launched
            events.append(Event(at, message, entry))
        return events

    def job_done(self, unit: str) -> Event | None:
        """When systemd finished starting `unit` successfully, if it did."""
        return next(
            (
                event
                for event in self.journal()
                if event.fields.get("MESSAGE_ID") == JOB_DONE
                and event.fields.get("UNIT") == unit
                and event.fields.get("JOB_TYPE") == "start"
                and event.fields.get("JOB_RESULT") == "done"
            ),
            None,
        )

    def logged(self, identifier: str) -> list[Event]:
        return [e for e in self.journal() if e.fields.get("SYSLOG_IDENTIFIER") == identifier]

    def leader(self) -> int:
        """The PID of the node's systemd, as the host sees it."""
        assert self.process is not None
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                status = Path(f"/proc/{child}/status").read_text()
                if re.search(r"^NSpid:\s+\d+\s+1$", status, re.MULTILINE):
                    return int(child)
        raise RuntimeError(f"{self.plan.name}: no systemd in its container")

    def inside(self, *command: str) -> str:
        return _run("nsenter", "-t", str(self.leader()), "-a", *command)

    def snapshot(self) -> None:
        """What the running node shows: its private NIC, routes and failed units."""
        if self.process is None or self.process.poll() is not None:
            self.state = {"failed": ["the container is not running"]}
            return
        self.state = {
            "addresses": json.loads(ip(self.namespace, "-j", "address", "show")),
            "routes": json.loads(ip(self.namespace, "-j", "-4", "route", "show", "table", "main")),
            "route_to_control_plane": self.route_to("10.0.1.10"),
            "route_to_metadata": self.route_to(METADATA_ADDRESS),
            "failed": self.inside(
                "systemctl", "list-units", "--state=failed", "--plain", "--no-legend"
            ).split("\n"),
            "active": {
                unit: self.inside_status("systemctl", "is-active", unit)
                for unit in ("k3s.service", "k3s-agent.service", "ssh.service",
                             "emergency.target", "rescue.target")
            },
            "connection": self.inside(
                "nmcli", "-g", "GENERAL.CONNECTION,GENERAL.STATE", "device", "show",
                PRIVATE_INTERFACE,
            ).splitlines() if self.has_private_nic() else [],
        }  # fmt: skip
        self.state["failed"] = [line for line in self.state["failed"] if line.strip()]

    def route_to(self, address: str) -> list[dict[str, Any]]:
        """The node's route to `address` ([] when it has none: one node's failure, not the
        run's)."""
        found: list[dict[str, Any]] = json.loads(
            subprocess.run(
                [require_tool("ip"), "-n", self.namespace, "-j", "route", "get", address],
                capture_output=True, text=True, timeout=60, check=False,
            ).stdout or "[]"
        )  # fmt: skip
        return found

    def inside_status(self, *command: str) -> str:
        """What a command inside the node prints, whatever its exit status."""
        command = ("nsenter", "-t", str(self.leader()), "-a", *command)
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        return result.stdout.strip()

    def has_private_nic(self) -> bool:
        return PRIVATE_INTERFACE in ip(self.namespace, "-o", "link", "show")


STANDIN = """#!/usr/bin/python3
# The stand-in k3s of the boot tests (tests/boot/standin.py), run by the node's python3
# with raya's tree and the test venv's packages mounted read-only.
import sys
sys.path[:0] = {paths!r}
from tests.boot.standin import main
sys.exit(main(sys.argv[1:]))
"""


def _stand_in_paths() -> list[str]:
    return [str(REPO), str(REPO / "src"), sysconfig.get_path("purelib")]


def prepare_node(base: Path, plan: NodePlan, namespace: str) -> BootedNode:
    """An overlay of `base` with the node's Ignition applied, its presets and a machine-id
    of its own (so systemd runs no first-boot preset-all), and the stand-in k3s."""
    folder = Path(tempfile.mkdtemp(prefix=f"raya-boot-{plan.name}-"))
    folder.chmod(0o755)  # Ignition writes SSH keys as their user
    node = BootedNode(plan, namespace, folder)
    for name in ("upper", "work", "merged"):
        (folder / name).mkdir()
    _run(
        "mount", "-t", "overlay", "overlay", "-o",
        f"lowerdir={base},upperdir={folder / 'upper'},workdir={folder / 'work'}",
        str(node.root),
    )  # fmt: skip
    fcos_layout(node.root)
    # FCOS' image has no SSH host keys (sshd-keygen makes the missing ones at boot); Debian's
    # openssh-server made some at install.
    for key in (node.root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    # The FCOS image names no host (debootstrap copied this machine's name): on Hetzner,
    # Afterburn sets the server's name from the metadata service, which the sim does not run;
    # a config that writes /etc/hostname overrides it (as a planned node's does).
    (node.root / "etc/hostname").write_text(f"{plan.name}\n")
    apply_ignition(plan.ignition, node.root)
    fedora_sshd_keygen(node.root)
    stand_in_github(node.root)
    for name in SELINUX_STUB:
        (node.root / name).unlink()
    presets = [
        line.split()[1]
        for preset in (node.root / "etc/systemd/system-preset").glob("*.preset")
        for line in preset.read_text().splitlines()
        if line.startswith(("enable ", "disable "))
    ]
    if presets:
        _run("systemctl", f"--root={node.root}", "preset", *presets)
    (node.root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    standin = node.root / K3S_BINARY_REAL.lstrip("/")
    standin.parent.mkdir(parents=True, exist_ok=True)
    standin.write_text(STANDIN.format(paths=_stand_in_paths()))
    standin.chmod(0o755)
    return node


# Fedora's openssh-server (src.fedoraproject.org/rpms/openssh: sshd-keygen@.service,
# sshd-keygen.target, the sshd-keygen script, sshd.service's `Wants=sshd-keygen.target`): at
# boot, each host key type whose file is missing or empty is made before sshd starts. FCOS
# ships no host key, so this is what makes an autoscaled node's. Debian's ssh.service is
# given the same dependency; the script's chgrp ssh_keys and restorecon have no use here.
SSHD_KEYGEN = {
    "usr/lib/systemd/system/sshd-keygen@.service": """[Unit]
Description=OpenSSH %i Server Key Generation
ConditionFileNotEmpty=|!/etc/ssh/ssh_host_%i_key

[Service]
Type=oneshot
ExecStartPre=/bin/rm -f /etc/ssh/ssh_host_%i_key /etc/ssh/ssh_host_%i_key.pub
ExecStart=/usr/bin/ssh-keygen -q -t %i -f /etc/ssh/ssh_host_%i_key -C '' -N ''

[Install]
WantedBy=sshd-keygen.target
""",
    "usr/lib/systemd/system/sshd-keygen.target": """[Unit]
Wants=sshd-keygen@rsa.service
Wants=sshd-keygen@ecdsa.service
Wants=sshd-keygen@ed25519.service
PartOf=sshd.service
""",
    "usr/lib/systemd/system/ssh.service.d/sshd-keygen.conf": """[Unit]
Wants=sshd-keygen.target
After=sshd-keygen.target
""",
}


def fedora_sshd_keygen(root: Path) -> None:
    for path, text in SSHD_KEYGEN.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def github_pages() -> dict[str, bytes]:
    """GitHub's `<handle>.keys` pages of the example users, served under SIM_GITHUB."""
    prefix = SIM_GITHUB.removeprefix(f"http://{METADATA_ADDRESS}")
    return {f"{prefix}/{user.handle}.keys": user.raw.encode() for user in EXAMPLE_USERS}


def stand_in_github(root: Path) -> None:
    """GitHub is out of reach of the simulated network: the key fetcher asks the stand-in
    instead (a drop-in replacing only the base URL of its command line)."""
    unit = root / "etc/systemd/system/raya-ssh-keys.service"
    (command,) = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    assert f" {GITHUB_URL} " in command, command
    dropin = unit.with_name(unit.name + ".d") / "boot-test.conf"
    dropin.parent.mkdir()
    dropin.write_text(f"[Service]\nExecStart=\n{command.replace(GITHUB_URL, SIM_GITHUB)}\n")


def _own_cgroups(name: str) -> Callable[[], None]:
    """Put the nspawn process in a cgroup of its own in both hierarchies: with --keep-unit
    nspawn uses the one it was started in, and two nodes would otherwise share it."""
    paths = [Path(f"/sys/fs/cgroup/{h}/raya-boot/{name}") for h in ("systemd", "unified")]
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)

    def enter() -> None:
        for path in paths:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    return enter


def _remove_cgroups(name: str) -> None:
    for hierarchy in ("systemd", "unified"):
        top = Path(f"/sys/fs/cgroup/{hierarchy}/raya-boot/{name}")
        if top.exists():
            for folder, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)


def _nspawn_run_dir() -> None:
    """nspawn aborts unless /run/systemd/nspawn is a tmpfs, and /run is none here."""
    path = Path("/run/systemd/nspawn")
    if not os.path.ismount(path):
        path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(path))


def attach_volume(node: BootedNode) -> None:
    """Attach the node's volume as Hetzner and udev would: its device node and the by-id link
    appear in the running node's /dev."""
    assert node.volume is not None and node.plan.volume is not None
    loop = node.volume.loop
    kind = os.stat(loop).st_rdev
    link = volume_device(node.plan.volume.id)
    node.inside(
        "sh", "-c",
        f"mknod {loop} b {os.major(kind)} {os.minor(kind)} && mkdir -p {Path(link).parent}"
        f" && ln -s {loop} {link}",
    )  # fmt: skip


def launch(node: BootedNode) -> None:
    _nspawn_run_dir()
    log = open(node.folder / "console.log", "wb")  # noqa: SIM115 (closed with the process)
    environment = {**os.environ, "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network"}
    node.launched = time.monotonic()
    node.process = subprocess.Popen(
        [
            require_tool("systemd-nspawn"), "--quiet", "--boot",
            f"--directory={node.root}", f"--machine={node.plan.name}",
            "--register=no", "--keep-unit", "--console=pipe",
            f"--network-namespace-path=/run/netns/{node.namespace}",
            "--capability=CAP_NET_ADMIN",
            f"--bind-ro={REPO}",
            # The test venv's packages, when they live outside the tree (a git worktree's
            # checkout using another's venv): the stand-in imports from there.
            *(f"--bind-ro={path}" for path in _stand_in_paths()
              if not Path(path).is_relative_to(REPO)),
            *_volume_at_boot(node),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment,
        preexec_fn=_own_cgroups(node.namespace),
    )  # fmt: skip
    log.close()


def _volume_at_boot(node: BootedNode) -> list[str]:
    """nspawn's bind of a volume present at boot, at its by-id path."""
    plan = node.plan.volume
    if plan is None or plan.attach_after != 0 or node.volume is None:
        return []
    return [f"--bind={node.volume.loop}:{volume_device(plan.id)}"]


def shutdown(node: BootedNode) -> None:
    if node.process is not None:
        _stop_process(node.process)
    _remove_cgroups(node.namespace)
    with contextlib.suppress(RuntimeError):
        _run("umount", str(node.root))
    shutil.rmtree(node.folder, ignore_errors=True)


_boots = itertools.count()


@dataclass
class Fleet:
    """What a scenario's step sees and may do while its fleet boots."""

    nodes: dict[str, BootedNode]
    start: Callable[[str], None]  # launch a held node
    cut: Callable[[str], None]  # take a node off the private network


@contextlib.contextmanager
def booted(
    plans: list[NodePlan],
    ready: Callable[[BootedNode], bool],
    deadline: float,
    *,
    balancer: Balancer | None = None,
    step: Callable[[Fleet], None] | None = None,
    names: Mapping[str, int] | None = None,
    probe: Callable[[Hetzner, dict[str, BootedNode]], None] | None = None,
) -> Iterator[dict[str, BootedNode]]:
    """Boot every planned node at once (held ones when `step` starts them) on one simulated
    Hetzner network, with `balancer` on its private side; call `step` every second; wait
    until each is `ready` (or `deadline` seconds have passed), snapshot them, `probe` them
    while they still run (it keeps what it finds in their `state`), stop them, and yield the
    stopped nodes, whose journals stay readable until the context exits. `names`: DNS names
    the public side answers (`Hetzner.start_dhcp`)."""
    base = debian_root()
    tag = f"{os.getpid() % 100000}-{next(_boots)}"
    with contextlib.ExitStack() as stack:
        hetzner = Hetzner(tag, stack)
        nodes: dict[str, BootedNode] = {}
        for index, plan in enumerate(plans):
            namespace = f"raya-{tag}-{index}"
            _run("ip", "netns", "add", namespace)
            stack.callback(_run, "ip", "netns", "delete", namespace)
            ip(namespace, "link", "set", "lo", "up")
            node = prepare_node(base, plan, namespace)
            stack.callback(shutdown, node)
            if plan.volume is not None:
                node.volume = make_volume(plan.volume, stack)
            nodes[plan.name] = node
            if plan.attachment != "none":
                hetzner.prepare_private(namespace, index, plan.attachment)
            if plan.dhcp:
                hetzner.serve_private_dhcp(index, plan.private_ip, plan.metadata_route)
        start = time.monotonic()
        for index, plan in enumerate(plans):
            hetzner.attach_public(
                nodes[plan.name].namespace,
                index,
                start + plan.metadata_unavailable_for,
                start + plan.github_unavailable_for,
                plan.name,
            )
        hetzner.start_dhcp(names)
        if balancer is not None:
            hetzner.balance(balancer)
        timers = []
        indexes = {plan.name: index for index, plan in enumerate(plans)}

        def start_node(name: str) -> None:
            node, index = nodes[name], indexes[name]
            arguments = (node.namespace, index, node.plan.private_ip, node.plan.attachment)
            if node.plan.attachment == "present":
                hetzner.connect_private(*arguments)
            launch(node)
            if node.plan.attachment not in ("present", "none"):
                timer = threading.Timer(node.plan.delay, hetzner.connect_private, arguments)
                timer.start()
                timers.append(timer)
            if node.plan.volume is not None and node.plan.volume.attach_after:
                timer = threading.Timer(node.plan.volume.attach_after, attach_volume, (node,))
                timer.start()
                timers.append(timer)

        for plan in plans:
            if not plan.held:
                start_node(plan.name)
        fleet = Fleet(nodes, start_node, lambda name: hetzner.cut_private(indexes[name]))
        waiting = dict(nodes)
        while waiting and time.monotonic() < start + deadline:
            time.sleep(1)
            if step is not None:
                step(fleet)
            for name, node in list(waiting.items()):
                if node.process is not None and ready(node):
                    node.snapshot()
                    del waiting[name]
        for node in waiting.values():
            node.snapshot()
        for index, node in enumerate(nodes.values()):
            node.state["ssh"] = hetzner.ssh_banner(hetzner.public_address(index))
            public = str(hetzner.public_address(index))
            node.state["public_address"] = public
            node.state["server_id"] = hetzner.server_id(index)
            node.state["metadata"] = [e for e in hetzner.metadata_log if e[1] == public]
            node.state["github"] = [e for e in hetzner.github_log if e[1] == public]
            node.state["private_dhcp"] = hetzner.private_dhcp(index)
        if probe is not None:
            probe(hetzner, nodes)
        for timer in timers:
            timer.cancel()
        for node in nodes.values():
            if node.process is not None:
                node.process.send_signal(signal.SIGTERM)
        for node in nodes.values():
            if node.process is not None:
                _stop_process(node.process)
        yield nodes


# Every booted node's systemd (its .path units, journald, udev's stand-ins) holds inotify
# instances from root's one quota, fs.inotify.max_user_instances (128 by default): about a
# dozen nodes at once exhaust it, and the last to start fail their .path units.
INOTIFY_INSTANCES = 1024


def _inotify_room(instances: int) -> None:
    """Raise root's inotify instance quota to `instances` (never lower it)."""
    limit = Path("/proc/sys/fs/inotify/max_user_instances")
    if int(limit.read_text()) < instances:
        limit.write_text(f"{instances}\n")


@contextlib.contextmanager
def booted_at_once(
    managers: Sequence[contextlib.AbstractContextManager[dict[str, BootedNode]]],
) -> Iterator[list[dict[str, BootedNode]]]:
    """Several `booted` fleets, each on a separate simulated network, booting at the same time
    (the boot test's wall time is that of its slowest fleet, not their sum)."""
    _nspawn_run_dir()
    _inotify_room(INOTIFY_INSTANCES)
    entered: list[dict[str, BootedNode] | None] = [None] * len(managers)
    errors: list[BaseException] = []

    def enter(index: int) -> None:
        try:
            entered[index] = managers[index].__enter__()
        except BaseException as error:  # re-raised below, in the caller
            errors.append(error)

    threads = [threading.Thread(target=enter, args=(i,)) for i in range(len(managers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        if errors:
            raise errors[0]
        yield [nodes for nodes in entered if nodes is not None]
    finally:
        for manager, nodes in zip(managers, entered, strict=True):
            if nodes is not None:
                manager.__exit__(None, None, None)
