"""Local stand-ins for the remote APIs `raya status` and `raya roll` talk to: Hetzner's server
API, authoritative DNS servers (dnslib), and a Kubernetes API over real TLS that requires a
client certificate from the cluster's client CA (as k3s does), with nodes, pods, evictions
and PodDisruptionBudget refusals. All on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dnslib import NS, QTYPE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSServer

from raya.nodes.identity import CertificateAuthority
from tests.nodes.k3s_join import serving_certificate


def hetzner_server(
    server_id: int, name: str, status: str, labels: Mapping[str, str] | None
) -> dict[str, Any]:
    """A server as GET /v1/servers/{id} answers it (the fields hcloud reads)."""
    image = None if labels is None else {"id": 42, "type": "snapshot", "labels": dict(labels)}
    return {
        "id": server_id,
        "name": name,
        "status": status,
        "created": "2026-11-01T00:00:00+00:00",
        "server_type": {"id": 1, "name": "cx23"},
        "image": image,
        "labels": {},
        "public_net": {"ipv4": None, "ipv6": None, "floating_ips": [], "firewalls": []},
        "private_net": [],
    }


class _Zones(BaseResolver):  # type: ignore[misc]
    def __init__(self, records: Mapping[str, list[str]], delegations: Mapping[str, list[str]]):
        self.records = records
        self.delegations = delegations
        self.asked: list[tuple[str, str, bool]] = []

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        name, kind = str(request.q.qname), QTYPE[request.q.qtype]
        self.asked.append((name, kind, bool(request.header.rd)))
        reply = request.reply()
        reply.header.aa = name in self.records
        if kind == "A":
            for address in self.records.get(name, []):
                reply.add_answer(RR(name, QTYPE.A, rdata=A(address), ttl=300))
        if kind == "NS":
            # A referral, as a parent zone's server answers for a delegated child.
            for server in self.delegations.get(name, []):
                reply.add_auth(RR(name, QTYPE.NS, rdata=NS(server), ttl=300))
        return reply


@contextlib.contextmanager
def dns_server(
    records: Mapping[str, list[str]], delegations: Mapping[str, list[str]] | None = None
) -> Iterator[tuple[int, _Zones]]:
    """An authoritative DNS server on 127.0.0.1 (UDP); its port and what it was asked."""
    zones = _Zones(records, delegations or {})

    class Quiet:
        def __getattr__(self, name: str) -> Callable[..., None]:
            return lambda *args: None

    server = DNSServer(zones, address="127.0.0.1", port=0, logger=Quiet())
    server.start_thread()
    try:
        yield server.server.server_address[1], zones
    finally:
        server.stop()
        server.server.server_close()


@dataclass
class Cluster:
    """What the fake API holds: nodes by name, pods, PDB refusals left per pod."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)  # pod name -> 429s before eviction
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # any other GET, by path
    log: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    lock: threading.Lock = field(default_factory=threading.Lock)


def node(
    name: str, version: str, ready: bool = True, unschedulable: bool = False, boot: str = "b0"
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "nodeInfo": {
                "kubeletVersion": version,
                "osImage": "Fedora CoreOS 43.20261101.3.0",
                "architecture": "amd64",
                "bootID": boot,
                "containerRuntimeVersion": "containerd://2",
                "kernelVersion": "6",
                "kubeProxyVersion": version,
                "machineID": "",
                "operatingSystem": "linux",
                "systemUUID": "",
            },
            "addresses": [{"type": "InternalIP", "address": "10.0.1.20"}],
        },
    }


def pod(
    name: str,
    namespace: str,
    node_name: str,
    owner: str | None = "ReplicaSet",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A running pod; `owner` is the kind of its controller (None: a bare pod)."""
    references = (
        [
            {
                "kind": owner,
                "name": f"{name}-owner",
                "apiVersion": "apps/v1",
                "uid": "u",
                "controller": True,
            }
        ]
        if owner
        else []
    )
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": references,
            "annotations": dict(annotations or {}),
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }


def _handler(state: Cluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            with state.lock:
                state.log.append(("GET", self.path))
                if path in state.objects:
                    return self._reply(200, state.objects[path])
                if path == "/api/v1/nodes":
                    items = list(state.nodes.values())
                    return self._reply(
                        200,
                        {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items},
                    )
                match = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
                if match:
                    found = state.nodes.get(match[1])
                    return self._reply(200, found) if found else self._reply(404, _status(404))
                if path == "/api/v1/pods":
                    wanted = re.search(r"fieldSelector=spec.nodeName%3D([^&]+)", query)
                    items = [
                        p for p in state.pods if not wanted or p["spec"]["nodeName"] == wanted[1]
                    ]
                    return self._reply(
                        200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
                    )
            self._reply(404, _status(404))

        def do_PATCH(self) -> None:
            body = self._body()
            with state.lock:
                state.log.append(("PATCH", self.path))
                match = re.fullmatch(r"/api/v1/nodes/([^/]+)", self.path)
                if match and match[1] in state.nodes:
                    spec = body.get("spec", {})
                    state.nodes[match[1]]["spec"].update(spec)
                    return self._reply(200, state.nodes[match[1]])
            self._reply(404, _status(404))

        def do_POST(self) -> None:
            self._body()
            with state.lock:
                state.log.append(("POST", self.path))
                match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", self.path)
                if match:
                    name = match[2]
                    if state.refusals.get(name, 0) > 0:
                        state.refusals[name] -= 1
                        return self._reply(
                            429,
                            _status(
                                429,
                                "Cannot evict pod as it would violate the pod's disruption budget.",
                            ),
                        )
                    state.pods = [p for p in state.pods if p["metadata"]["name"] != name]
                    return self._reply(201, _status(201))
            self._reply(404, _status(404))

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def _status(code: int, message: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "code": code,
        "status": "Success" if code < 300 else "Failure",
        "message": message,
    }


@contextlib.contextmanager
def kubernetes_api(
    state: Cluster,
    server_ca: CertificateAuthority,
    client_ca_pem: str,
    folder: Path,
    name: str,
) -> Iterator[str]:
    """The API over TLS with a certificate from `server_ca` for `name` (k3s' tls-san) and
    127.0.0.1, to clients holding a certificate from `client_ca_pem` only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*serving_certificate(server_ca, folder, dns_names=[name]))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=client_ca_pem)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
