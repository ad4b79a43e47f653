"""Benchmark: how long `raya --help`, `raya --version` and `raya butane FILE` take to start.

Not a test: it prints figures and ratios (the goal is under 150 ms each on the build VM).
Each command runs as its own process, like a user runs it; the floor is `python -c pass`
with the same interpreter. Best of N runs, wall clock and the child's CPU time (user +
system): on a shared machine the wall clock also counts time other processes held the
core, the CPU time does not.

    .venv/bin/python bench/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.butane

from bench.butane import example_configs

RAYA = Path(sys.executable).parent / "raya"  # the console script a user runs


def best(argv: list[str], runs: int) -> tuple[float, float]:
    """(wall, cpu) seconds of the fastest run of `argv`, each the minimum over `runs`."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=os.environ | {
            "COLUMNS": "80"})
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(walls), min(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per command; the best counts")
    args = parser.parse_args()

    control_plane = example_configs(1)[0]
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "control-plane.bu"
        config.write_text(control_plane)
        commands = [
            ("python -c pass (floor)", [sys.executable, "-c", "pass"]),
            ("raya --version", [str(RAYA), "--version"]),
            ("raya --help", [str(RAYA), "--help"]),
            (f"raya butane FILE ({len(control_plane):,} B)", [str(RAYA), "butane", str(config)]),
        ]
        results = [(label, *best(argv, args.runs)) for label, argv in commands]
    floor_wall, floor_cpu = results[0][1:]
    print(f"start-up, best of {args.runs} runs (wall clock / CPU time of the process):")
    for label, wall, cpu in results:
        print(f"  {label:<34} {wall * 1000:6.1f} ms ({wall / floor_wall:4.1f}x the floor)"
              f"  {cpu * 1000:6.1f} ms CPU ({cpu / floor_cpu:4.1f}x)")


if __name__ == "__main__":
    main()
