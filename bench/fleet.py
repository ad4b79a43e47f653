"""A time and request model of day two at fleet scale: `raya up` of 3 control planes and 200
agents, and `raya roll` of all 200 agents, today's serial roll (one node, one engine run over
the whole stack, at a time) beside the batched one (`--max-unavailable 10%`: 20 at a time,
one targeted engine run per batch). It prints the projected wall time and the Hetzner API
requests of each, against the project's budget.

A model, not a measurement: each parameter below is named with where its figure comes from.
"sourced" figures are read from the code that runs (raya's, the tests' stand-ins', Pulumi's,
hcloud's) or from Hetzner's API reference; "assumed" ones are not measured anywhere here (no
Hetzner account in this checkout) and are the first to measure against a real project: the
projection moves with them, and the script prints how.

Usage: .venv/bin/python bench/fleet.py
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from raya.cloud.deploy import SHUTDOWN_POLL
from raya.defaults import MAX_UNAVAILABLE
from raya.model.unavailable import MaxUnavailable
from raya.operate.roll import POLL


@dataclass(frozen=True)
class Parameters:
    # Hetzner's API reference, "Rate Limiting": 3,600 requests an hour per project, one
    # refilled a second (sourced).
    budget_per_hour: int = 3600
    # Kept for Hetzner's cloud controller and CSI driver, which spend from the same project's
    # budget (DESIGN.md, "Hetzner's limits"): a third (assumed: their rate depends on their
    # versions and the cluster's Services and volumes; measure with the RateLimit headers).
    reserved_per_hour: int = 1200
    # Hetzner's actions, request to `success` (assumed: the API reference gives no figure).
    server_create: float = 20.0
    server_delete: float = 5.0
    # FCOS' ACPI shutdown to `off` (assumed: systemd stopping k3s and the units).
    shutdown: float = 10.0
    # A new server's creation to its kubelet posting Ready (sourced: the figure the roll's
    # tests model, tests/operate/test_roll.py `BOOT`; bench/boot.py times the in-node part).
    boot_to_ready: float = 90.0
    # A drain: the default terminationGracePeriodSeconds a pod may use after its eviction
    # (sourced: Kubernetes `SetDefaults_PodSpec`, 30 s), plus raya's look every POLL.
    drain: float = 30.0 + POLL
    # `pulumi up`: the CLI, the language host, the program and the providers starting
    # (assumed), then per resource of the stack registered and diffed (assumed; no API
    # request: Pulumi's bridge diffs against the state, and `up` does not refresh).
    engine_start: float = 25.0
    engine_per_resource: float = 0.05
    # Resources of the stack: per agent its server and DNS record (sourced: the program,
    # raya/cloud/program), and the rest (network, firewall, PKI, zone, add-ons, control
    # planes' volumes, balancer: about 30 here, assumed at fleet scale).
    resources_per_agent: int = 2
    resources_fixed: int = 30
    # Pulumi's `--parallel`: unbounded by default (sourced: pulumi `up --help`, "Defaults
    # to unbounded"): a batch's servers are created at once.
    # The provider polls an action from `hcloud:pollInterval` (500 ms by default: the
    # pulumi-hcloud provider's configuration) doubling each time (`poll_function`
    # exponential by default since terraform-provider-hcloud 1.45.0, #798) (sourced). Its
    # other requests per server: a create's POST and reads back, a delete's status check and
    # DELETE (assumed from terraform-provider-hcloud's shape: 3 and 2).
    provider_poll: float = 0.5
    provider_create_extra: int = 3
    provider_delete_extra: int = 2
    # raya's own requests (sourced: raya.cloud.deploy and catalogue): the server types, one
    # request per type in the fleet, before each engine run and once per roll; the cluster's
    # servers listed 50 a page (hcloud-python `get_all`), one shutdown per server, one list
    # every SHUTDOWN_POLL seconds until they are off. Today's serial shut_down asked per
    # server: its name, its shutdown, its status every SHUTDOWN_POLL seconds.
    server_types: int = 2
    page: int = 50
    # Fleet.
    control_planes: int = 3
    agents: int = 200


def polls(p: Parameters, action: float) -> int:
    """Looks at an action of `action` seconds, `provider_poll` apart and doubling: the k-th
    look comes provider_poll * (2^k - 1) seconds on."""
    return math.ceil(math.log2(action / p.provider_poll + 1))


def provider_requests(p: Parameters) -> tuple[int, int]:
    """The provider's requests to create one server, and to delete one."""
    create = polls(p, p.server_create) + p.provider_create_extra
    delete = polls(p, p.server_delete) + p.provider_delete_extra
    return create, delete


def engine_run(p: Parameters, resources: int) -> float:
    return p.engine_start + p.engine_per_resource * resources


def stack_resources(p: Parameters) -> int:
    return p.resources_fixed + p.resources_per_agent * (p.agents + p.control_planes)


def budget_wait(p: Parameters, requests: int, seconds: float) -> float:
    """Seconds added while requests beyond what the budget gives a run of `seconds` wait
    for their refill."""
    share = (p.budget_per_hour - p.reserved_per_hour) / 3600.0
    return max(0.0, (requests - available(p, seconds)) / share)


def available(p: Parameters, seconds: float) -> float:
    """What the budget gives a run of `seconds` beside the reserve: the bucket's share, full
    at the start, and the share of what refills meanwhile."""
    room = p.budget_per_hour - p.reserved_per_hour
    return room + room / 3600.0 * seconds


@dataclass(frozen=True)
class Projection:
    what: str
    seconds: float
    requests: int
    waited: float  # seconds spent waiting for the budget

    def line(self, p: Parameters) -> str:
        room = available(p, self.seconds)
        verdict = (
            f"within the {room:,.0f} the budget gives it beside CCM and CSI"
            if not self.waited
            else f"{self.waited / 60:.1f} min of it waiting for the budget"
        )
        return (
            f"  {self.what:46} {self.seconds / 60:6.1f} min {self.requests:6,d} requests: "
            f"{verdict}"
        )


def up(p: Parameters) -> Projection:
    """Every server created at once by the engine (unbounded parallelism), then booted."""
    create, _ = provider_requests(p)
    servers = p.agents + p.control_planes
    requests = p.server_types + servers * create
    seconds = engine_run(p, stack_resources(p)) + p.server_create + p.boot_to_ready
    waited = budget_wait(p, requests, seconds)
    return Projection("up: 3 control planes + 200 agents", seconds + waited, requests, waited)


def roll_serial(p: Parameters) -> Projection:
    """Today: per agent a drain, one engine run over the whole stack (the server shut down,
    deleted, created), its boot; raya's shutdown by name, polled by id."""
    create, delete = provider_requests(p)
    per_node = (
        p.drain
        + engine_run(p, stack_resources(p))
        + p.shutdown + SHUTDOWN_POLL
        + p.server_delete + p.server_create
        + p.boot_to_ready + POLL
    )  # fmt: skip
    polls = math.ceil(p.shutdown / SHUTDOWN_POLL)
    own = p.server_types + 1 + 1 + polls  # types before the run, name, shutdown, polls
    requests = p.server_types + p.agents * (own + create + delete)
    seconds = p.agents * per_node
    waited = budget_wait(p, requests, seconds)
    return Projection("roll of 200 agents, serial (before)", seconds + waited, requests, waited)


def roll_batched(p: Parameters, limit: MaxUnavailable) -> Projection:
    """Batched: per batch the drains at once, one targeted engine run over the batch's
    servers and DNS records, its servers shut down, deleted and created at once, then
    booted; raya's shutdowns with one list per look."""
    create, delete = provider_requests(p)
    size = limit.of(p.agents)
    batches = math.ceil(p.agents / size)
    pages = math.ceil((p.agents + p.control_planes) / p.page)
    polls = math.ceil(p.shutdown / SHUTDOWN_POLL)
    per_batch = (
        p.drain
        + engine_run(p, p.resources_fixed + p.resources_per_agent * size)
        + p.shutdown + SHUTDOWN_POLL
        + p.server_delete + p.server_create
        + p.boot_to_ready + POLL
    )  # fmt: skip
    own = p.server_types + pages + size + polls * pages
    requests = p.server_types + batches * own + p.agents * (create + delete)
    seconds = batches * per_batch
    waited = budget_wait(p, requests, seconds)
    what = f"roll of 200 agents, batched ({limit}: {size} a batch)"
    return Projection(what, seconds + waited, requests, waited)


def report(p: Parameters) -> None:
    limit = MaxUnavailable.parse(MAX_UNAVAILABLE)
    for projection in (up(p), roll_serial(p), roll_batched(p, limit)):
        print(projection.line(p))


def main() -> None:
    p = Parameters()
    create, delete = provider_requests(p)
    print(f"fleet: {p.control_planes} control planes + {p.agents} agents, "
          f"{stack_resources(p)} resources in the stack")  # fmt: skip
    print(f"per server, the provider's requests (assumed): create {create}, delete {delete}")
    print("\nprojected, with the parameters as named in bench/fleet.py:")
    report(p)
    print("\nthe same, each assumed figure doubled in turn (what moves the projection):")
    for name in ("server_create", "shutdown", "engine_start", "engine_per_resource",
                 "reserved_per_hour", "boot_to_ready"):  # fmt: skip
        print(f" {name} x2:")
        report(replace(p, **{name: getattr(p, name) * 2}))


if __name__ == "__main__":
    main()
