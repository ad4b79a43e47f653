"""Local stand-ins for remote APIs `raya status` talks to: Hetzner's server API and
authoritative DNS servers (dnslib), on 127.0.0.1. The Kubernetes API's is
`tests/operate/kube_api.py`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dnslib import NS, QTYPE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSServer


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
