"""Hetzner Cloud API's server types on 127.0.0.1, for `raya preview | up`'s check that each
node's type is sold in its location (raya.cloud.deploy.check_sold), `raya roll`'s that each
node's replacement can be created (check_replaceable) and `raya image build`'s choice of a
build server (raya.cloud.catalogue.build_type).

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

Snapshots, when a test gives them as `SNAPSHOTS` (the engine model's `Snapshot`s, so that the
program's look-up and this API see the same images): `GET /v1/images` with the filters the
API reference lists ("List Images": `type`, `status`, `architecture`, `label_selector`, each
`type`/`status`/`architecture` repeatable and or-ed) answers `images`, each with its `id`,
`type`, `status`, `architecture`, `created` and `labels`; a `label_selector` of `k=v` terms
(comma-separated, all required: the only form raya writes, `raya.model.pins.label_selector`).

`DELETE /v1/servers/{id}` (API reference, "Delete a Server") answers the action
`delete_server`, `running`: the model marks the server `deleting` and removes it once the
action's time is over (`Hetzner.delete_server_later`), at a later request, never within this
one.

A server's answer also carries its `image` (the image it was created from, null once that is
deleted), `created` and `server_type` (with its `architecture`), as the API reference's
"Get a Server" shows them.

Servers are listed with `label_selector` too (API reference, "Label Selector": terms joined
by commas, all of which must hold; `k=v` the label's value, `k` alone the label present),
each with its `labels`, 25 to a page unless
`per_page` (at most 50) says otherwise, `page` choosing which; hcloud-python's `get_all`
asks for 50 a page and follows `next_page`.

Rate limiting (API reference, "Rate Limiting"): every request of a project (its token)
spends one from a budget of `Budget.limit` (3,600), refilled one a second up to the limit;
every answer carries `RateLimit-Limit` (the budget), `RateLimit-Remaining` (what is left after
this request) and `RateLimit-Reset` (the Unix time at which the budget is full again); a
request that finds it empty is answered 429 with the error code `rate_limit_exceeded`, and
spends nothing. `BUDGET` is the project's, made anew for each test; `BUDGET.requests`
counts what was asked, as `METHOD path` without the query.

The catalogue is this test's own, in the shape Hetzner sells: the shared x86 types of the
current generation (cx23...) and the Arm64 types (cax*) in the EU locations only, the older
shared x86 (cpx*) everywhere, dearer outside the EU (as `prices` per location are). A test
sets a type's state in one location through `STATES` ((type, location) -> the fields it
replaces): a `deprecation` (`{"announced": ..., "unavailable_after": ...}`, RFC 3339, as
hcloud-python's `DeprecationInfo` parses them) or `available: false`. A type whose
deprecation there has passed stays listed with it here: the API reference does not say when
Hetzner drops it from `locations`, only that past `unavailable_after` it "can not be used in
new resources" (hcloud-python `DeprecationInfo`), so a client must read that date, and treat
a type no longer listed in a location as not sold there.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.cloud.program.hetzner import Hetzner
from tests.support import Reply, reply_parts

# The Hetzner model the servers' routes serve, for the test running now (None: a project
# without servers).
MODEL: Hetzner | None = None

TOKEN = "hetznerTestToken" * 4
EU = ("fsn1", "nbg1", "hel1")
EVERYWHERE = (*EU, "ash", "hil", "sin")
LOCATION_IDS = {"fsn1": 1, "nbg1": 2, "hel1": 3, "ash": 4, "hil": 5, "sin": 6}
# name -> architecture, locations, disk (GB), net price per hour in the EU.
CATALOGUE: dict[str, tuple[str, tuple[str, ...], int, str]] = {
    "cx23": ("x86", EU, 40, "0.0056"),
    "cx33": ("x86", EU, 80, "0.0088"),
    "cx43": ("x86", EU, 160, "0.0152"),
    "cx53": ("x86", EU, 320, "0.0280"),
    "cax11": ("arm", EU, 40, "0.0064"),
    "cax21": ("arm", EU, 80, "0.0104"),
    "cax31": ("arm", EU, 160, "0.0200"),
    "cax41": ("arm", EU, 320, "0.0392"),
    "cpx11": ("x86", EVERYWHERE, 40, "0.0072"),
    "cpx21": ("x86", EVERYWHERE, 80, "0.0120"),
    "cpx31": ("x86", EVERYWHERE, 160, "0.0216"),
    "cpx41": ("x86", EVERYWHERE, 240, "0.0400"),
}
# (type, location) -> the fields of its `locations` entry a test replaces.
STATES: dict[tuple[str, str], dict[str, object]] = {}
# The project's snapshots (tests/cloud/program/mocks.py `Snapshot`), for `GET /v1/images`.
SNAPSHOTS: list[Any] = []
RATE_LIMIT = 3600  # requests an hour per project, refilled one a second
RATE_LIMITED: Reply = (
    429,
    b'{"error": {"code": "rate_limit_exceeded", "message": "limit of 3600 requests per hour '
    b'reached"}}',
    "application/json",
)


@dataclass
class Budget:
    """The project's request budget: `limit` at most, one refilled every `refill` seconds
    of `clock` (Unix time)."""

    limit: int = RATE_LIMIT
    refill: float = 1.0
    clock: Callable[[], float] = time.time
    requests: list[str] = field(default_factory=list)
    refused: int = 0  # requests answered 429
    _left: float = -1.0
    _at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def spend(self, what: str) -> tuple[bool, dict[str, str]]:
        """Whether request `what` is allowed (one spent; not when the budget is empty), and
        the RateLimit headers of its answer."""
        with self._lock:
            now = self.clock()
            if self._left < 0:
                self._left, self._at = float(self.limit), now
            self._left = min(float(self.limit), self._left + (now - self._at) / self.refill)
            self._at = now
            allowed = self._left >= 1
            if allowed:
                self._left -= 1
                self.requests.append(what)
            else:
                self.refused += 1
            missing = self.limit - self._left
            return allowed, {
                "RateLimit-Limit": str(self.limit),
                "RateLimit-Remaining": str(math.floor(self._left)),
                "RateLimit-Reset": str(math.ceil(now + missing * self.refill)),
            }


BUDGET = Budget()


def _price(net: str, location: str) -> dict[str, str]:
    """Hetzner charges more outside the EU: a fifth more here."""
    value = Decimal(net) * (1 if location in EU else Decimal("1.2"))
    return {"net": f"{value:.10f}", "gross": f"{value * Decimal('1.19'):.10f}"}


def server_type(number: int, name: str) -> dict[str, object]:
    architecture, places, disk, net = CATALOGUE[name]
    return {
        "id": number,
        "name": name,
        "description": name.upper(),
        "category": "cost_optimized" if architecture == "arm" else "regular_purpose",
        "cores": 2,
        "memory": 4.0,
        "disk": disk,
        "deprecated": False,
        "deprecation": None,
        "storage_type": "local",
        "cpu_type": "shared",
        "architecture": architecture,
        "prices": [
            {
                "location": place,
                "price_hourly": _price(net, place),
                "price_monthly": _price(str(Decimal(net) * 730), place),
                "included_traffic": 21990232555520,
                "price_per_tb_traffic": _price("1", place),
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
                **STATES.get((name, place), {}),
            }
            for place in places
        ],
    }


NOT_FOUND: Reply = (
    404,
    b'{"error": {"code": "not_found", "message": "not found"}}',
    "application/json",
)


def _pages(count: int, page: int = 1, per_page: int = 25) -> dict[str, Any]:
    """The `meta` of a list answer: page `page` of `count` entries, `per_page` a page."""
    last = max(1, math.ceil(count / per_page))
    return {
        "pagination": {
            "page": page,
            "per_page": per_page,
            "previous_page": page - 1 if page > 1 else None,
            "next_page": page + 1 if page < last else None,
            "last_page": last,
            "total_entries": count,
        }
    }


def servers(request: BaseHTTPRequestHandler, model: Hetzner) -> Reply:
    """The servers' routes on the model."""
    parts = urlsplit(request.path)

    def server(found: Any) -> dict[str, Any]:
        known = {snapshot.id: snapshot for snapshot in SNAPSHOTS}
        image = (
            {"id": found.image, "type": "snapshot",
             "labels": dict(known[found.image].labels) if found.image in known else {}}
            if found.image else None
        )  # fmt: skip
        kind = {"name": found.server_type, "architecture": CATALOGUE[found.server_type][0]}
        return {"id": found.id, "name": found.name, "status": found.status,
                "labels": found.labels, "image": image, "created": found.created,
                "server_type": kind}  # fmt: skip

    model.settle()
    if request.command == "GET" and parts.path == "/v1/servers":
        query = parse_qs(parts.query)
        names = query.get("name")
        terms = [t.partition("=") for s in query.get("label_selector", []) for t in s.split(",")]
        found = [
            server(s)
            for s in sorted(model.servers.values(), key=lambda s: s.id)
            if (names is None or s.name in names)
            and all(
                s.labels.get(key) == value if equals else key in s.labels
                for key, equals, value in terms
            )
        ]
        per_page = min(int(query.get("per_page", ["25"])[0]), 50)
        page = int(query.get("page", ["1"])[0])
        body: dict[str, Any] = {
            "servers": found[(page - 1) * per_page : page * per_page],
            "meta": _pages(len(found), page, per_page),
        }
        return 200, json.dumps(body).encode(), "application/json"
    match = re.fullmatch(r"/v1/servers/(\d+)(/actions/shutdown)?", parts.path)
    if match is None or int(match[1]) not in model.servers:
        return NOT_FOUND
    if request.command == "GET" and not match[2]:
        return 200, json.dumps({"server": server(model.servers[int(match[1])])}).encode()
    if request.command == "DELETE" and not match[2]:
        model.requests.append(f"delete {model.servers[int(match[1])].name}")
        model.delete_server_later(int(match[1]))
        return 200, json.dumps({"action": _action("delete_server", int(match[1]))}).encode()
    if request.command == "POST" and match[2]:
        model.requests.append(f"shutdown {model.servers[int(match[1])].name}")
        model.shutdown_server(int(match[1]))
        action = _action("shutdown_server", int(match[1]))
        return 201, json.dumps({"action": action}).encode(), "application/json"
    return NOT_FOUND


def _action(command: str, server_id: int) -> dict[str, Any]:
    """An action on a server, just started (API reference, "Actions")."""
    return {
        "id": server_id * 10 + len(command),
        "command": command,
        "status": "running",
        "progress": 0,
        "started": "2026-12-01T00:00:00+00:00",
        "finished": None,
        "resources": [{"id": server_id, "type": "server"}],
        "error": None,
    }


def images(request: BaseHTTPRequestHandler) -> Reply:
    """`GET /v1/images` over `SNAPSHOTS`, filtered as the API reference says."""
    query = parse_qs(urlsplit(request.path).query)
    wanted = dict(
        term.split("=", 1) for term in ",".join(query.get("label_selector", [])).split(",") if term
    )

    def kept(snapshot: Any) -> bool:
        return (
            "snapshot" in query.get("type", ["snapshot"])
            and snapshot.status in query.get("status", [snapshot.status])
            and snapshot.architecture in query.get("architecture", [snapshot.architecture])
            and all(snapshot.labels.get(key) == value for key, value in wanted.items())
        )

    found = [
        {"id": s.id, "type": "snapshot", "status": s.status, "architecture": s.architecture,
         "created": s.created, "labels": s.labels, "description": f"snapshot {s.id}"}
        for s in SNAPSHOTS if kept(s)
    ]  # fmt: skip
    body = {"images": found, "meta": _pages(len(found))}
    return 200, json.dumps(body).encode(), "application/json"


def respond(request: BaseHTTPRequestHandler, asked: list[str]) -> Reply:
    """The answer to `request`, within the project's budget (`BUDGET`), its RateLimit
    headers added; each name asked for is appended to `asked`."""
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        refused = {"error": {"code": "unauthorized", "message": "unable to authenticate"}}
        return 401, json.dumps(refused).encode(), "application/json"
    allowed, headers = BUDGET.spend(f"{request.command} {urlsplit(request.path).path}")
    status, body, kind, _ = reply_parts(answer(request, asked) if allowed else RATE_LIMITED)
    return status, body, kind or "application/json", headers


def answer(request: BaseHTTPRequestHandler, asked: list[str]) -> Reply:
    parts = urlsplit(request.path)
    if parts.path.startswith("/v1/servers"):
        return servers(request, MODEL or Hetzner())  # no model: a project without servers
    if parts.path == "/v1/images" and request.command == "GET":
        return images(request)
    if parts.path != "/v1/server_types":
        return NOT_FOUND
    return server_types(request, asked)


def server_types(request: BaseHTTPRequestHandler, asked: list[str]) -> tuple[int, bytes, str]:
    """`GET /v1/server_types`, filtered by `name` if given; each name asked for is appended
    to `asked`."""
    names = parse_qs(urlsplit(request.path).query).get("name", list(CATALOGUE))
    asked.extend(names)
    found = [
        server_type(number, name)
        for number, name in enumerate(CATALOGUE, 1)
        if name in names
    ]
    body: dict[str, object] = {"server_types": found, "meta": _pages(len(found))}
    return 200, json.dumps(body).encode(), "application/json"
