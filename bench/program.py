"""Benchmark: the Pulumi program under mocks for a control plane + 200 agents.

Run: .venv/bin/python bench/program.py [--rounds 3] [--before OTHER/src]
Target (issue 26): one run (every resource declared, every node's Ignition rendered) under
2 seconds. Each round runs the program in a fresh interpreter, as `pulumi up` does, on a new
state, and reports the CPU time of that run alone (the mocks' work included: they compute
realistic outputs, real keys and certificates, as in tests/cloud/program). `--before` runs
it again with another checkout's sources (e.g. main's `src`, through PYTHONPATH) in the same
rounds: the ratios compare the two. CPU time is the figure: on a shared machine the wall
clock also counts other processes.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.cloud.program.mocks

from bench.processes import arguments, checkouts, child, load, ratios, spread

AGENTS = 200
TARGET = 2.0
ROOT = Path(__file__).resolve().parents[1]
CLUSTER_TOKEN = "bench" + "0" * 59  # stands for raya:clusterHcloudToken (64 characters)


def one_run() -> None:
    """The child of a round: CPU seconds of one run of the program, printed."""
    from tests.cloud.program.mocks import ProviderMocks, Snapshot, Zone, run_program

    from raya.cloud.program import define
    from raya.model.fleet import build_cluster
    from raya.model.pins import load_chart_pins, load_pins, snapshot_labels
    from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
    from raya.nodes.render import render_node

    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    cluster = build_cluster(example.config, ("cx23",) * AGENTS, "bench")
    pins = load_pins(ROOT)
    render = functools.partial(render_node, charts=load_chart_pins(ROOT))
    labels = snapshot_labels(pins, cluster.config.cluster_name)
    mocks = ProviderMocks(
        zones=[Zone("example-com", "example.com.")], snapshots=[Snapshot(1, labels)]
    )
    start = time.process_time()
    result = run_program(
        mocks, lambda: define(cluster, pins, render, hcloud_token=CLUSTER_TOKEN)
    )
    seconds = time.process_time() - start
    print(json.dumps({"seconds": seconds, "resources": len(result.resources)}))


def main() -> None:
    args = arguments(__doc__.splitlines()[0], rounds=3)
    if args.child:
        one_run()
        return
    sources = checkouts(args.before)
    times: dict[str, list[float]] = {label: [] for label in sources}
    resources = 0
    start_load = load()
    for _ in range(args.rounds):
        for label, env in sources.items():
            found = child(__file__, env)
            taken, resources = found["seconds"], found["resources"]
            times[label].append(taken)
    print(
        f"program under mocks: control plane + {AGENTS} agents, {resources} resources, new "
        f"state; {args.rounds} paired rounds, CPU time (min median max); {start_load} before, "
        f"{load()} after"
    )
    for label, seconds in times.items():
        line = (f"  {label:<9} {spread(seconds)}  "
                f"x target {TARGET:.0f} s {ratios(seconds, [TARGET] * args.rounds)}")
        if label != "this tree":
            line += f"  this tree / before {ratios(times['this tree'], seconds)}"
        print(line)


if __name__ == "__main__":
    main()
