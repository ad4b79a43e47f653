"""Hetzner Cloud API's server types on 127.0.0.1, for `raya preview | up`'s check that each
node's type is sold in its location (raya.cloud.deploy.sold_locations).

Shaped as the API reference's "List Server Types" answers (`GET /v1/server_types`, filter
`name`; https://docs.hetzner.cloud/reference/cloud#server-types): each type with its
`architecture`, `prices` per location and, since 2025-09-24, `locations`, where it can be
ordered, each with its own `deprecation`, and whether it is `available` (in stock) and
`recommended` there now (Hetzner Cloud changelog, "per location server types";
hcloud-python 2.27 `hcloud/server_types/domain.py`, `ServerTypeLocation`, which requires all
four). A request without `Authorization: Bearer <TOKEN>` is 401 `unauthorized`.

Servers, when a test gives the Hetzner model (`tests/cloud/program/hetzner.py`) as `MODEL`
(`deployed_cloud` does): `GET /v1/servers?name=` and `GET /v1/servers/{id}` answer a server
with its `id`, `name` and `status` (API reference, "Servers": `running`, `off`, ...);
`POST /v1/servers/{id}/actions/shutdown` asks the model for an ACPI shutdown and answers
the action (`shutdown_server`, status `running` until it is done: a client polls the
server's status); an unknown id is 404 `not_found`.

The catalogue is this test's own, in the shape Hetzner sells: the shared x86 types of the
current generation (cx23...) and the Arm64 types (cax*) in the EU locations only, the older
shared x86 (cpx*) everywhere.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.cloud.program.hetzner import Hetzner
from tests.support import Reply

# The Hetzner model the servers' routes serve, for the test running now (None: a project
# without servers).
MODEL: Hetzner | None = None

TOKEN = "hetznerTestToken" * 4
EU = ("fsn1", "nbg1", "hel1")
EVERYWHERE = (*EU, "ash", "hil", "sin")
LOCATION_IDS = {"fsn1": 1, "nbg1": 2, "hel1": 3, "ash": 4, "hil": 5, "sin": 6}
CATALOGUE: dict[str, tuple[str, tuple[str, ...]]] = {
    **{name: ("x86", EU) for name in ("cx23", "cx33", "cx43", "cx53")},
    **{name: ("arm", EU) for name in ("cax11", "cax21", "cax31", "cax41")},
    **{name: ("x86", EVERYWHERE) for name in ("cpx21", "cpx31", "cpx41")},
}


def server_type(number: int, name: str) -> dict[str, object]:
    architecture, places = CATALOGUE[name]
    price = {"net": "0.0100000000", "gross": "0.0119000000"}
    return {
        "id": number,
        "name": name,
        "description": name.upper(),
        "category": "cost_optimized" if architecture == "arm" else "regular_purpose",
        "cores": 2,
        "memory": 4.0,
        "disk": 40,
        "deprecated": False,
        "deprecation": None,
        "storage_type": "local",
        "cpu_type": "shared",
        "architecture": architecture,
        "prices": [
            {
                "location": place,
                "price_hourly": price,
                "price_monthly": price,
                "included_traffic": 21990232555520,
                "price_per_tb_traffic": price,
            }
            for place in places
        ],
        "locations": [
            {
                "id": LOCATION_IDS[place],
                "name": place,
                "deprecation": None,
                "available": True,
                "recommended": True,
            }
            for place in places
        ],
    }


NOT_FOUND: Reply = (
    404,
    b'{"error": {"code": "not_found", "message": "not found"}}',
    "application/json",
)


def _pages(count: int) -> dict[str, Any]:
    return {
        "pagination": {
            "page": 1,
            "per_page": 25,
            "previous_page": None,
            "next_page": None,
            "last_page": 1,
            "total_entries": count,
        }
    }


def servers(request: BaseHTTPRequestHandler, model: Hetzner) -> Reply:
    """The servers' routes on the model."""
    parts = urlsplit(request.path)

    def server(found: Any) -> dict[str, Any]:
        return {"id": found.id, "name": found.name, "status": found.status}

    if request.command == "GET" and parts.path == "/v1/servers":
        names = parse_qs(parts.query).get("name")
        found = [server(s) for s in model.servers.values() if names is None or s.name in names]
        body: dict[str, Any] = {"servers": found, "meta": _pages(len(found))}
        return 200, json.dumps(body).encode(), "application/json"
    match = re.fullmatch(r"/v1/servers/(\d+)(/actions/shutdown)?", parts.path)
    if match is None or int(match[1]) not in model.servers:
        return NOT_FOUND
    if request.command == "GET" and not match[2]:
        return 200, json.dumps({"server": server(model.servers[int(match[1])])}).encode()
    if request.command == "POST" and match[2]:
        model.requests.append(f"shutdown {model.servers[int(match[1])].name}")
        model.shutdown_server(int(match[1]))
        action = {
            "id": len(model.log) + 1,
            "command": "shutdown_server",
            "status": "running",
            "progress": 0,
            "started": "2026-12-01T00:00:00+00:00",
            "finished": None,
            "resources": [{"id": int(match[1]), "type": "server"}],
            "error": None,
        }
        return 201, json.dumps({"action": action}).encode(), "application/json"
    return NOT_FOUND


def respond(request: BaseHTTPRequestHandler, asked: list[str]) -> Reply:
    """The answer to `request`; each name asked for is appended to `asked`."""
    parts = urlsplit(request.path)
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        refused = {"error": {"code": "unauthorized", "message": "unable to authenticate"}}
        return 401, json.dumps(refused).encode(), "application/json"
    if parts.path.startswith("/v1/servers"):
        return servers(request, MODEL or Hetzner())  # no model: a project without servers
    if parts.path != "/v1/server_types":
        return NOT_FOUND
    names = parse_qs(parts.query).get("name", list(CATALOGUE))
    asked.extend(names)
    found = [
        server_type(number, name)
        for number, name in enumerate(CATALOGUE, 1)
        if name in names
    ]
    pagination: dict[str, int | None] = {
        "page": 1,
        "per_page": 25,
        "previous_page": None,
        "next_page": None,
        "last_page": 1,
        "total_entries": len(found),
    }
    body: dict[str, object] = {"server_types": found, "meta": {"pagination": pagination}}
    return 200, json.dumps(body).encode(), "application/json"
