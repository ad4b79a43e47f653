"""Hetzner Cloud API's server types on 127.0.0.1, for `raya preview | up`'s check that each
node's type is sold in its location (raya.cloud.deploy.sold_locations).

Shaped as the API reference's "List Server Types" answers (`GET /v1/server_types`, filter
`name`; https://docs.hetzner.cloud/reference/cloud#server-types): each type with its
`architecture`, `prices` per location and, since 2025-09-24, `locations`, where it can be
ordered, each with its own `deprecation`, and whether it is `available` (in stock) and
`recommended` there now (Hetzner Cloud changelog, "per location server types";
hcloud-python 2.27 `hcloud/server_types/domain.py`, `ServerTypeLocation`, which requires all
four). A request without `Authorization: Bearer <TOKEN>` is 401 `unauthorized`.

The catalogue is this test's own, in the shape Hetzner sells: the shared x86 types of the
current generation (cx23...) and the Arm64 types (cax*) in the EU locations only, the older
shared x86 (cpx*) everywhere.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from tests.support import Reply

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


def respond(request: BaseHTTPRequestHandler, asked: list[str]) -> Reply:
    """The answer to `request`; each name asked for is appended to `asked`."""
    parts = urlsplit(request.path)
    if parts.path != "/v1/server_types":
        return 404, b'{"error": {"code": "not_found", "message": "not found"}}', "application/json"
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        refused = {"error": {"code": "unauthorized", "message": "unable to authenticate"}}
        return 401, json.dumps(refused).encode(), "application/json"
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
