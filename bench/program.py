"""Benchmark: the Pulumi program under mocks for a control plane + 200 agents.

Run: .venv/bin/python bench/program.py [--rounds 3] [--before OTHER/src] [--scale]
Target (issue 26): one run (every resource declared, every node's Ignition rendered) under
2 seconds. Each round runs the program in a fresh interpreter, as `pulumi up` does, on a new
state, and reports the CPU time of that run alone (the mocks' work included: they compute
realistic outputs, real keys and certificates, as in tests/cloud/program). `--before` runs
it again with another checkout's sources (e.g. main's `src`, through PYTHONPATH) in the same
rounds: the ratios compare the two. CPU time is the figure: on a shared machine the wall
clock also counts other processes. Each round also prints the render's share (its callback
timed in its own thread) and, for the SDK's part, the CPU time the same resources (types and
names) take to declare as plain custom resources under mocks that do nothing: with no
properties (what the SDK costs per resource), and with the properties the provider classes
give them (their inputs, and each output property as None: an Output each).
The fleet is in the public mode (`raya:network: public`): the private one holds 100 nodes at
most. `--scale` measures instead, for 5 control planes and 100, 500, 1,000 agents, the
program under the same mocks and the firewall computation alone (`firewall_layout`: the
rules, split to Hetzner's limits): CPU time and peak memory, each fleet in a fresh process.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import pulumi

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.cloud.program.mocks

from bench.processes import (
    SCALE_AGENTS,
    arguments,
    checkouts,
    child,
    load,
    peak_rss_mib,
    ratios,
    scale_child,
    scale_fleet,
    scale_table,
    spread,
)
from bench.shares import Timed

AGENTS = 200
TARGET = 2.0
ROOT = Path(__file__).resolve().parents[1]
CLUSTER_TOKEN = "bench" + "0" * 59  # stands for raya:clusterHcloudToken (64 characters)


def one_run() -> None:
    """The child of a round: CPU seconds of one run of the program, printed."""
    import dataclasses

    from tests.cloud.program.mocks import ProviderMocks, Snapshot, Zone, reveal, run_program

    from raya.cloud.program import define
    from raya.model.fleet import build_cluster
    from raya.model.pins import load_chart_pins, load_pins, snapshot_labels
    from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
    from raya.nodes.render import render_node

    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    config = dataclasses.replace(example.config, network="public")
    cluster = build_cluster(config, ("cx23",) * AGENTS, "bench")
    pins = load_pins(ROOT)
    render = Timed(functools.partial(render_node, charts=load_chart_pins(ROOT)))
    labels = snapshot_labels(pins, cluster.config.cluster_name)
    mocks = ProviderMocks(
        zones=[Zone("example-com", "example.com.")], snapshots=[Snapshot(1, labels)]
    )
    # The mocks stand for the providers: their share shows what the program leaves to them.
    mocking = [Timed(mocks.new_resource), Timed(mocks.call)]
    mocks.new_resource, mocks.call = mocking  # type: ignore[method-assign]
    start = time.process_time()
    result = run_program(
        mocks, lambda: define(cluster, pins, render, hcloud_token=CLUSTER_TOKEN)
    )
    seconds = time.process_time() - start
    bare: list[tuple[str, str, dict[str, Any]]] = [
        (found.typ, found.name, {}) for found in result.resources.values()
    ]
    full = [(found.typ, found.name, dict.fromkeys(found.outputs) | reveal(found.inputs))
            for found in result.resources.values()]
    print(json.dumps({"seconds": seconds, "resources": len(bare), "render": render.seconds,
                      "mocks": sum(timed.seconds for timed in mocking),
                      "bare": declaring_alone(bare), "full": declaring_alone(full)}))


def scale_run(agents: int) -> None:
    """The child of --scale: CPU seconds of the firewall computation alone, then of one run
    of the program under mocks, and the peak memory before and after, printed."""
    import dataclasses
    import ipaddress

    from tests.cloud.program.mocks import ProviderMocks, Snapshot, Zone, run_program

    from raya.cloud.program import define
    from raya.cloud.program.firewall import effective_rules, firewall_layout
    from raya.model.pins import load_chart_pins, load_pins, snapshot_labels
    from raya.nodes.render import render_node

    cluster = scale_fleet(agents)
    pins = load_pins(ROOT)
    render = functools.partial(render_node, charts=load_chart_pins(ROOT))
    labels = snapshot_labels(pins, cluster.config.cluster_name)
    mocks = ProviderMocks(
        zones=[Zone("example-com", "example.com.")], snapshots=[Snapshot(1, labels)]
    )
    # The worst case besides: two narrow API sources, so the nodes are listed for the API too.
    narrow = dataclasses.replace(
        cluster,
        config=dataclasses.replace(
            cluster.config,
            api_sources=(ipaddress.ip_network("203.0.113.0/24"),
                         ipaddress.ip_network("2001:db8::/32")),
        ),
    )  # fmt: skip
    before = peak_rss_mib()
    start = time.process_time()
    layout = firewall_layout(cluster)
    firewall = time.process_time() - start
    start = time.process_time()
    narrow_layout = firewall_layout(narrow)
    narrow_seconds = time.process_time() - start
    start = time.process_time()
    result = run_program(
        mocks, lambda: define(cluster, pins, render, hcloud_token=CLUSTER_TOKEN)
    )
    seconds = time.process_time() - start
    print(json.dumps({"firewall": firewall, "program": seconds, "rss_before": before,
                      "rss_peak": peak_rss_mib(), "resources": len(result.resources),
                      "firewalls": len(layout),
                      "effective": [effective_rules(rules) for rules in layout],
                      "firewall narrow": narrow_seconds,
                      "narrow": [effective_rules(rules) for rules in narrow_layout]}))


class NoOutputs(pulumi.runtime.Mocks):
    """Mocks that do nothing: every resource gets an id and no outputs."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", {}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def declaring_alone(resources: list[tuple[str, str, dict[str, Any]]]) -> float:
    """CPU seconds the SDK takes to declare `resources` (type, name, properties) as plain
    custom resources under NoOutputs, until every id is known."""
    pulumi.runtime.set_mocks(NoOutputs(), project="raya", stack="floor", preview=False)
    start = time.process_time()
    ids = [pulumi.CustomResource(typ, name, props).id for typ, name, props in resources]
    asyncio.get_event_loop().run_until_complete(pulumi.Output.all(*ids).future())
    return time.process_time() - start


def main() -> None:
    args = arguments(__doc__.splitlines()[0], rounds=3, scale="the program and the firewalls")
    if args.child:
        one_run()
        return
    if args.scale_child:
        scale_run(args.scale_child)
        return
    if args.scale:
        rows = {agents: scale_child(__file__, agents) for agents in SCALE_AGENTS}
        scale_table("program under mocks", rows, ("program", "firewall", "firewall narrow"))
        for agents, found in rows.items():
            print(f"  N={agents:>5}: {found['resources']} resources, {found['firewalls']} "
                  f"firewalls of {found['effective']} effective rules (Hetzner: 5 of 500); "
                  f"with narrow raya:apiSources {len(found['narrow'])} of {found['narrow']}")
        return
    sources = checkouts(args.before)
    times: dict[tuple[str, str], list[float]] = {}
    resources = 0
    start_load = load()
    for _ in range(args.rounds):
        for label, env in sources.items():
            found = child(__file__, env)
            resources = found["resources"]
            times.setdefault((label, "program"), []).append(found["seconds"])
            times.setdefault((label, "  render"), []).append(found["render"])
            times.setdefault((label, "  mocks"), []).append(found["mocks"])
            times.setdefault((label, "declaring bare"), []).append(found["bare"])
            times.setdefault((label, "declaring full"), []).append(found["full"])
    print(
        f"program under mocks: control plane + {AGENTS} agents, {resources} resources, new "
        f"state; {args.rounds} paired rounds, CPU time (min median max); {start_load} before, "
        f"{load()} after"
    )
    for (label, part), seconds in times.items():
        line = (f"  {label:<9} {part:<15} {spread(seconds)}  "
                f"x target {TARGET:.0f} s {ratios(seconds, [TARGET] * args.rounds)}")
        if label != "this tree":
            line += f"  this tree / before {ratios(times[('this tree', part)], seconds)}"
        print(line)


if __name__ == "__main__":
    main()
