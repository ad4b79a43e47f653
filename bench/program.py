"""Benchmark: the Pulumi program under mocks for a control plane + 200 agents.

Run: .venv/bin/python bench/program.py
Target (issue 26): one run (every resource declared, every node's Ignition rendered) under
2 seconds.
The mocks compute realistic outputs (real keys and certificates), as in tests/program.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.cloud.program.mocks

from tests.cloud.program.mocks import ProviderMocks, Snapshot, Zone, run_program

from raya.cloud.program import define
from raya.model.fleet import build_cluster
from raya.model.pins import load_chart_pins, load_pins, snapshot_labels
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.render import render_node

AGENTS = 200
TARGET = 2.0
RUNS = 3
ROOT = Path(__file__).resolve().parents[1]
CLUSTER_TOKEN = "bench" + "0" * 59  # stands for raya:clusterHcloudToken (64 characters)


def main() -> None:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    cluster = build_cluster(example.config, ("cx23",) * AGENTS, "bench")
    pins = load_pins(ROOT)
    render = functools.partial(render_node, charts=load_chart_pins(ROOT))

    def mocks() -> ProviderMocks:
        labels = snapshot_labels(pins, cluster.config.cluster_name)
        return ProviderMocks(
            zones=[Zone("example-com", "example.com.")], snapshots=[Snapshot(1, labels)]
        )

    def timed(state: ProviderMocks) -> tuple[float, int]:
        start = time.perf_counter()
        result = run_program(
            state, lambda: define(cluster, pins, render, hcloud_token=CLUSTER_TOKEN)
        )
        return time.perf_counter() - start, len(result.resources)

    first = [timed(mocks()) for _ in range(RUNS)]
    kept = mocks()
    timed(kept)
    again = [timed(kept) for _ in range(RUNS)]
    resources = first[0][1]
    print(
        f"program under mocks: control plane + {AGENTS} agents, "
        f"{resources} resources, {RUNS} runs each"
    )
    print(f"  load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for label, runs in (("new state", first), ("same state", again)):
        seconds = [each for each, _ in runs]
        median = statistics.median(seconds)
        print(
            f"  {label:<10}  min {min(seconds):6.2f} median {median:6.2f} max {max(seconds):6.2f} s"
            f"  target {TARGET:.0f} s  "
            f"ratio {median / TARGET:5.2f}  ({'ok' if median < TARGET else 'SLOWER THAN TARGET'})"
        )


if __name__ == "__main__":
    main()
