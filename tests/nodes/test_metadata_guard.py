"""The rule set that keeps pods from the metadata service, loaded by the real nft into
network namespaces this test creates: a "pod" whose traffic a "node" forwards to a
"metadata" namespace serving HTTP on 169.254.169.254, as Hetzner's metadata service does."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raya.nodes.render import METADATA_ADDRESS, RenderedNode
from tests.nodes.tools import ignition_files
from tests.support import require_root, require_tool

pytestmark = pytest.mark.tools

RULES = "/etc/nftables/raya-metadata-guard.nft"
USERDATA = "/hetzner/v1/userdata"
MARKER = b"user_data of this server"
# Serves MARKER on 169.254.169.254:80 and says "ready" once listening, so no client polls.
SERVER = f"""
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write({MARKER!r})
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(({METADATA_ADDRESS!r}, 80), Handler)
print("ready", flush=True)
server.serve_forever()
"""


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def _must(*command: str) -> None:
    result = _run(*command)
    assert result.returncode == 0, (command, result.stderr)


def _rules(rendered: dict[str, RenderedNode], name: str) -> bytes:
    return ignition_files(rendered[name].ignition)[RULES]


@pytest.mark.parametrize("name", ["control-plane", "agent-0"])
def test_nft_accepts_the_rule_set(
    rendered: dict[str, RenderedNode], name: str, tmp_path: Path
) -> None:
    nft = require_tool("nft")
    require_root("nft -c (it asks the kernel)")
    path = tmp_path / "rules.nft"
    path.write_bytes(_rules(rendered, name))
    assert _run(nft, "-c", "-f", str(path)).returncode == 0
    # ...and the check can fail: a misspelled hook is refused.
    path.write_text(path.read_text().replace("hook forward", "hook forwad"))
    refused = _run(nft, "-c", "-f", str(path))
    assert refused.returncode == 1
    assert "Error: unknown chain hook" in refused.stderr


@contextlib.contextmanager
def _namespaces() -> Iterator[dict[str, str]]:
    """pod (10.42.0.2) -> node (forwarding) -> metadata (169.254.169.254/16)."""
    suffix = secrets.token_hex(4)
    names = {role: f"raya-{role}-{suffix}" for role in ("pod", "node", "metadata")}
    created = []
    try:
        for namespace in names.values():
            _must("ip", "netns", "add", namespace)
            created.append(namespace)
            _must("ip", "-n", namespace, "link", "set", "lo", "up")
        pod, node, metadata = names["pod"], names["node"], names["metadata"]
        _must("ip", "-n", node, "link", "add", "to-pod", "type", "veth",
              "peer", "name", "eth0", "netns", pod)  # fmt: skip
        _must("ip", "-n", node, "link", "add", "to-metadata", "type", "veth",
              "peer", "name", "eth0", "netns", metadata)  # fmt: skip
        for namespace, device, address in (
            (pod, "eth0", "10.42.0.2/24"),
            (node, "to-pod", "10.42.0.1/24"),
            (node, "to-metadata", "169.254.0.1/16"),
            (metadata, "eth0", f"{METADATA_ADDRESS}/16"),
        ):
            _must("ip", "-n", namespace, "address", "add", address, "dev", device)
            _must("ip", "-n", namespace, "link", "set", device, "up")
        _must("ip", "-n", pod, "route", "add", "default", "via", "10.42.0.1")
        _must("ip", "-n", metadata, "route", "add", "10.42.0.0/24", "via", "169.254.0.1")
        _must("ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        yield names
    finally:
        for namespace in created:
            _run("ip", "netns", "delete", namespace)


@contextlib.contextmanager
def _metadata_server(namespace: str) -> Iterator[None]:
    server = subprocess.Popen(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        yield
    finally:
        server.kill()
        server.wait()


def _fetch(curl: str, namespace: str) -> subprocess.CompletedProcess[str]:
    url = f"http://{METADATA_ADDRESS}{USERDATA}"
    return _run("ip", "netns", "exec", namespace, curl, "-sS", "--max-time", "3", url)


def test_pods_cannot_reach_the_metadata_service_the_node_can(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    nft, curl = require_tool("nft"), require_tool("curl")
    require_tool("ip")
    require_root("network namespace tests")
    rules = tmp_path / "rules.nft"
    rules.write_bytes(_rules(rendered, "agent-0"))
    with _namespaces() as names, _metadata_server(names["metadata"]):
        # Without the rule set the pod is served: the path works, so what stops it later is
        # the rule set and nothing else.
        before = _fetch(curl, names["pod"])
        assert (before.returncode, before.stdout) == (0, MARKER.decode()), before.stderr

        _must("ip", "netns", "exec", names["node"], nft, "-f", str(rules))
        _must("ip", "netns", "exec", names["node"], nft, "-f", str(rules))  # reloadable

        refused = _fetch(curl, names["pod"])
        assert refused.returncode in (7, 28), refused  # refused or timed out, never served
        assert refused.stdout == ""
        served = _fetch(curl, names["node"])
        assert (served.returncode, served.stdout) == (0, MARKER.decode()), served.stderr

        listing = _run("ip", "netns", "exec", names["node"], nft, "list", "ruleset").stdout
        assert listing.count("table inet raya_metadata_guard") == 1
        # The pod's packets met the drop rule (the counter moved), not some other failure.
        assert "counter packets 0 " not in listing
