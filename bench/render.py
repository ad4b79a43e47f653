"""Benchmark: rendering time for a control plane + 200 agents, and config sizes by user count.

Run: .venv/bin/python bench/render.py
Target: the whole 201-node fleet in under 1 second.
"""

from __future__ import annotations

import gzip
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.nodes.fakes

from tests.nodes.fakes import many_users, with_users

from raya.fleet import build_cluster
from raya.github_keys import authorized_keys, load_keys_file
from raya.identity import generate_example_secrets
from raya.pins import load_chart_pins
from raya.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.render import IGNITION_LIMIT, INLINE_KEYS_BUDGET, keys_inline, render_cluster

CHARTS = load_chart_pins(EXAMPLE_ROOT)

AGENTS = 200
TARGET = 1.0
RUNS = 5


def fleet_time() -> None:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    cluster = build_cluster(example.config, ("cx23",) * AGENTS, "bench")
    secrets = generate_example_secrets()
    users = load_keys_file(EXAMPLE_ROOT / "keys.json")
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        nodes = render_cluster(cluster, secrets, users, charts=CHARTS)
        times.append(time.perf_counter() - start)
    total = sum(len(node.ignition) for node in nodes)
    best, median = min(times), statistics.median(times)
    print(f"fleet: control plane + {AGENTS} agents = {len(nodes)} nodes, {total:,} bytes")
    print(f"  first run (templates compiled): {times[0]:.3f} s")
    print(f"  best of {RUNS}: {best:.3f} s, median {median:.3f} s")
    print(f"  per node: {best / len(nodes) * 1000:.2f} ms")
    print(f"  target {TARGET:.1f} s: median is {median / TARGET:.0%} of it")


def size_table() -> None:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    secrets = generate_example_secrets()
    print(
        f"\nsizes, users with 3 RSA-4096 keys each (limit {IGNITION_LIMIT:,} B; "
        f"keys inline up to {INLINE_KEYS_BUDGET:,} B of text, else pinned fetches):"
    )
    header = ("users", "handle", "keys text", "gzipped", "keys", "control plane", "agent")
    rows = [header]
    for count in (1, 10, 50):
        for long_handles in (False, True):
            users = many_users(count, long_handles=long_handles)
            cluster = with_users(example, users)
            nodes = render_cluster(cluster, secrets, users, charts=CHARTS)
            text = "".join(key + "\n" for key in authorized_keys(users)).encode()
            cp, agent = len(nodes[0].ignition), len(nodes[1].ignition)
            rows.append(
                (
                    str(count),
                    f"{len(users[0].handle)} chars",
                    f"{len(text):,} B",
                    f"{len(gzip.compress(text, 9, mtime=0)):,} B",
                    "inline" if keys_inline(users) else "pinned",
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
