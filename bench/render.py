"""Benchmark: rendering time for a control plane + 200 agents, and config sizes by user count.

Run: .venv/bin/python bench/render.py
Target (issue 26): the whole 201-node fleet in under 0.5 s in-process (1 s as a process).
"""

from __future__ import annotations

import dataclasses
import os
import random
import statistics
import string
import time

from raya.butane import dataurl
from raya.errors import RenderError
from raya.model.fleet import Cluster, build_cluster
from raya.model.pins import load_chart_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import generate_example_secrets
from raya.nodes.render import IGNITION_LIMIT, render_cluster

VOLUME_ID = "100000001"
CHARTS = load_chart_pins(EXAMPLE_ROOT)

AGENTS = 200
TARGET = 0.5
RUNS = 5


def fleet_time() -> None:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    cluster = build_cluster(example.config, ("cx23",) * AGENTS, "bench")
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    times = []
    for _ in range(RUNS):
        # Each run as a fresh process would do it: what every node carries is compressed
        # once per process, not once per run.
        dataurl._gzip_if_shorter.cache_clear()
        start = time.perf_counter()
        nodes = render_cluster(cluster, secrets, volume_id=VOLUME_ID, charts=CHARTS)
        times.append(time.perf_counter() - start)
    total = sum(len(node.ignition) for node in nodes)
    best, median = min(times), statistics.median(times)
    print(f"fleet: control plane + {AGENTS} agents = {len(nodes)} nodes, {total:,} bytes "
          f"(load average {' '.join(f'{v:.2f}' for v in os.getloadavg())})")
    print(f"  first run (templates compiled): {times[0]:.3f} s")
    print(f"  {RUNS} runs: min {best:.3f} s, median {median:.3f} s, max {max(times):.3f} s")
    print(f"  per node: {best / len(nodes) * 1000:.2f} ms")
    print(f"  target {TARGET:.1f} s: median is {median / TARGET:.0%} of it")


def handles(count: int, long_handles: bool) -> tuple[str, ...]:
    """`count` distinct GitHub handles: `user-00`... or 39 random letters and digits
    (GitHub's longest logins; random, so gzip cannot shrink them as it would a shared prefix)."""
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits
    if not long_handles:
        return tuple(f"user-{i:02d}" for i in range(count))
    return tuple("".join(rng.choice(alphabet) for _ in range(39)) for _ in range(count))


def with_handles(cluster: Cluster, users: tuple[str, ...]) -> Cluster:
    return dataclasses.replace(
        cluster, config=dataclasses.replace(cluster.config, authorized_users=users)
    )


def size_table() -> None:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    secrets = generate_example_secrets(node.name for node in example.nodes)
    print(
        f"\nsizes by user count (limit {IGNITION_LIMIT:,} B; only the handles are carried, "
        "the nodes fetch the keys):"
    )
    header = ("users", "handle", "control plane", "agent")
    rows = [header]
    for count in (1, 10, 50, 130, 200):
        for long_handles in (False, True):
            users = handles(count, long_handles)
            cluster = with_handles(example, users)
            try:
                nodes = render_cluster(cluster, secrets, volume_id=VOLUME_ID, charts=CHARTS)
            except RenderError as error:  # the refusal a user would see: over the limit
                rows.append((str(count), f"{len(users[0])} chars", str(error).split(";")[0], ""))
                continue
            cp, agent = len(nodes[0].ignition), len(nodes[1].ignition)
            rows.append(
                (
                    str(count),
                    f"{len(users[0])} chars",
                    f"{cp:,} B ({cp / IGNITION_LIMIT:.0%})",
                    f"{agent:,} B ({agent / IGNITION_LIMIT:.0%})",
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    fleet_time()
    size_table()
