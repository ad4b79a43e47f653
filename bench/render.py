"""Benchmark: rendering a control plane + 200 agents, and config sizes by user count.

Run: .venv/bin/python bench/render.py [--rounds 5] [--before OTHER/src] [--scale]
The fleet is in the public mode (`raya:network: public`): the private one holds 100 nodes at
most, and the configs differ by a few lines. `--before` compares with a checkout that has it.
`--scale` measures instead the render of 5 control planes and 100, 500, 1,000 agents: CPU
time and peak memory, each fleet in a fresh process.
Targets (issue 26): the 201 configs in under 0.5 s in-process, and `raya render` of them in
under 1 s as a process. Each round runs, one after the other (paired, see bench/processes.py):
- in-process: a fresh interpreter renders the fleet once and reports the CPU time of that
  render alone: what a process's first render pays, with nothing cached yet, split into
  the Butane transpiler's share (`raya.butane.transpile`, timed around each call) and the
  rest (raya.nodes: checks, contexts, templates);
- as a process: `raya render` of a project holding the example's config and 200 agents, the
  CPU time of the whole process (start-up, throwaway secrets, render, writing 402 files).
The in-process child also prints the Go gzip model's share of the transpiler's, and the floor
of any pure-Python render: that share plus libyaml's C composer reading the same 201 configs
(bench/shares.py), the two parts no Python code around them can skip.
`--before` runs both again with another checkout's sources (e.g. main's `src`, read through
PYTHONPATH, never written to) in the same rounds: the ratios compare the two.
CPU time is the figure: on a shared machine the wall clock also counts other processes.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import string
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.processes

from bench.processes import (
    SCALE_AGENTS,
    arguments,
    checkouts,
    child,
    cpu_time,
    load,
    peak_rss_mib,
    ratios,
    scale_child,
    scale_fleet,
    scale_table,
    spread,
)
from bench.shares import compose_seconds, timing
from raya.butane import dataurl
from raya.errors import RenderError
from raya.model.fleet import Cluster, build_cluster, fleet_file
from raya.model.pins import load_chart_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes import render
from raya.nodes.identity import generate_example_secrets
from raya.nodes.render import IGNITION_LIMIT, render_cluster

VOLUME_ID = "100000001"
CHARTS = load_chart_pins(EXAMPLE_ROOT)
RAYA = str(Path(sys.executable).parent / "raya")  # the console script a user runs

AGENTS = 200
TARGETS = {"in-process": 0.5, "floor": 0.5, "as a process": 1.0}


def fleet() -> Cluster:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    config = dataclasses.replace(example.config, network="public")
    return build_cluster(config, ("cx23",) * AGENTS, "bench")


def scale_render(agents: int) -> None:
    """The child of --scale: CPU seconds and peak memory of rendering the scale fleet."""
    cluster = scale_fleet(agents)
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    ids = {node.name: str(100000001 + k) for k, node in enumerate(cluster.control_planes)}
    before = peak_rss_mib()
    start = time.process_time()
    nodes = render_cluster(cluster, secrets, volume_id=ids, charts=CHARTS)
    seconds = time.process_time() - start
    largest = max(len(node.ignition) for node in nodes)
    print(json.dumps({"render": seconds, "rss_before": before, "rss_peak": peak_rss_mib(),
                      "largest": largest}))


def one_render() -> None:
    """The child of an in-process round: CPU seconds of one render of the fleet, and of the
    part of it spent in `raya.butane.transpile` (the transpiler's share), printed."""
    cluster = fleet()
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    # By the names their callers look them up by.
    with timing(render, "transpile") as transpiling, timing(dataurl, "gzip_if_shorter") as gzip:
        start = time.process_time()
        nodes = render_cluster(cluster, secrets, volume_id=VOLUME_ID, charts=CHARTS)
        seconds = time.process_time() - start
    composing = compose_seconds(node.butane for node in nodes)
    print(json.dumps({"seconds": seconds, "transpile": transpiling.seconds,
                      "gzip": gzip.seconds, "floor": gzip.seconds + composing,
                      "bytes": sum(len(node.ignition) for node in nodes)}))


def fleet_time(rounds: int, before: Path | None) -> None:
    sources = checkouts(before)
    with tempfile.TemporaryDirectory(prefix="raya-bench-") as folder:
        project = Path(folder) / "project"
        shutil.copytree(EXAMPLE_ROOT, project)
        fleet_file(project).write_text(json.dumps({"agents": ["cx23"] * AGENTS}))
        stack = project / f"Pulumi.{EXAMPLE_STACK}.yaml"
        stack.write_text(stack.read_text() + "  raya:network: public\n")
        # Its report on stderr is not the benchmark's.
        render = ["sh", "-c", 'exec "$@" 2>/dev/null', "sh", RAYA, "render", "--root",
                  str(project), "--stack", EXAMPLE_STACK, "--out", str(Path(folder) / "out")]
        times: dict[tuple[str, str], list[float]] = {}
        size = 0
        start_load = load()
        for _ in range(rounds):
            for label, env in sources.items():
                found = child(__file__, env)
                taken, size = found["seconds"], found["bytes"]
                times.setdefault((label, "in-process"), []).append(taken)
                times.setdefault((label, "  transpiler"), []).append(found["transpile"])
                times.setdefault((label, "    gzip"), []).append(found["gzip"])
                times.setdefault((label, "  the rest"), []).append(taken - found["transpile"])
                times.setdefault((label, "floor"), []).append(found["floor"])
                times.setdefault((label, "as a process"), []).append(
                    cpu_time([*render[:4], *env, *render[4:]])
                )
    print(f"fleet: control plane + {AGENTS} agents = {AGENTS + 1} nodes, {size:,} bytes of "
          f"Ignition; {rounds} paired rounds, CPU time (min median max); "
          f"{start_load} before, {load()} after")
    for (label, kind), seconds in times.items():
        line = f"  {label:<9} {kind:<12} {spread(seconds)}  "
        if kind in TARGETS:
            target = TARGETS[kind]
            line += f"x target {target:.1f} s {ratios(seconds, [target] * rounds)}"
        else:  # a share of the in-process figure
            line += f"{'':<27}"
        if label != "this tree":
            line += f"  this tree / before {ratios(times[('this tree', kind)], seconds)}"
        print(line.rstrip())


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


def main() -> None:
    args = arguments(__doc__.splitlines()[0], rounds=5, scale="the render")
    if args.child:
        one_render()
        return
    if args.scale_child:
        scale_render(args.scale_child)
        return
    if args.scale:
        rows = {agents: scale_child(__file__, agents) for agents in SCALE_AGENTS}
        scale_table("render", rows, ("render",))
        for agents, found in rows.items():
            print(f"  N={agents:>5}: largest config {found['largest']:,} B of {IGNITION_LIMIT:,}")
        return
    fleet_time(args.rounds, args.before)
    size_table()


if __name__ == "__main__":
    main()
