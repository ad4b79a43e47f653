"""Benchmark: a newcomer's first `./raya` runs in a fresh clone, two commits side by side.

Not a test: it prints figures. Targets (issue 36): the first `./raya render --example`
under 15 s, the first `./raya preview --help` under 30 s (each in its own fresh clone,
so each pays the whole set-up: the virtualenv, the installer, raya's packages).

Each round clones the repository at each commit into a new folder and runs each command
there once, timing the wall clock (set-up is downloads and disk as much as CPU), the
first line of output, and the longest silence (the most seconds between two lines of
output, or between the start and the first, or the last and the exit: what a user waits
without a sign of progress). The commits alternate their order from round to round, so
that neither always runs first on a shared machine; the median of the rounds is reported.

Caches: `cold` (the default) gives every run an empty pip and uv cache (PIP_CACHE_DIR,
UV_CACHE_DIR), as on a machine that never installed these packages: everything is
downloaded from the package index. `warm` fills one cache with an untimed run of each
command and commit first and shares it, as on a machine that installed them once. Only
committed files are measured: the clones are of commits.

    python3 bench/firstrun.py [--before main] [--after HEAD] [--rounds 3] [--cache cold]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {"./raya render --example": 15.0, "./raya preview --help": 30.0}  # target, s


@dataclass(frozen=True)
class Run:
    seconds: float  # wall clock, start to exit
    first_line: float  # seconds to the first line of output
    silence: float  # the longest wait without a line of output


def commit(ref: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref],
                          check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip


def clone(sha: str, into: Path) -> None:
    common = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--git-common-dir"],
                            check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    subprocess.run(["git", "clone", "-q", str((REPO / common).resolve()), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", sha], check=True)


def timed(command: str, folder: Path, env: dict[str, str], log: Path) -> Run:
    """Runs `command` in `folder`, stdout and stderr as one stream (written to `log`),
    noting when each line arrives."""
    start = time.monotonic()
    stamps: list[float] = []
    process = subprocess.Popen(command.split(), cwd=folder, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    assert process.stdout is not None

    def read() -> None:
        with log.open("wb") as sink:
            for line in iter(process.stdout.readline, b""):  # type: ignore[union-attr]
                stamps.append(time.monotonic() - start)
                sink.write(line)

    reader = threading.Thread(target=read)
    reader.start()
    status = process.wait()
    reader.join()
    seconds = time.monotonic() - start
    if status != 0:
        raise SystemExit(f"{command} exited {status} in {folder}; its output: {log}")
    marks = [0.0, *stamps, seconds]
    silence = max(later - earlier for earlier, later in pairwise(marks))
    return Run(seconds, stamps[0] if stamps else seconds, silence)


def first_run(sha: str, command: str, cache: Path, work: Path, label: str) -> Run:
    folder = work / label
    clone(sha, folder)
    env = os.environ | {"PIP_CACHE_DIR": str(cache / "pip"), "UV_CACHE_DIR": str(cache / "uv")}
    try:
        return timed(command, folder, env, work / f"{label}.log")
    finally:
        shutil.rmtree(folder)


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


WIDTH = 48  # of a cell: "  5.6 s ( 5.4- 12.5)  first  0.2 s  silent  1.1 s"


def summary(runs: list[Run]) -> str:
    """Median (min-max) seconds, and the medians of the first line's and the longest silence."""
    seconds = [run.seconds for run in runs]
    silence = statistics.median(run.silence for run in runs)
    first = statistics.median(run.first_line for run in runs)
    return (f"{statistics.median(seconds):5.1f} s ({min(seconds):4.1f}-{max(seconds):5.1f})"
            f"  first {first:4.1f} s  silent {silence:4.1f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="the commit (or branch) before")
    parser.add_argument("--after", default="HEAD", help="the commit (or branch) after")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (fresh clones each)")
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold",
                        help="cold: empty pip and uv caches in every run; warm: one filled "
                        "cache, shared")  # fmt: skip
    parser.add_argument(
        "--only",
        choices=("before", "after"),
        help="measure one side only (the other is left blank)",
    )
    args = parser.parse_args()
    sides = {"before": commit(args.before), "after": commit(args.after)}
    if args.only:
        sides = {args.only: sides[args.only]}
    work = Path(tempfile.mkdtemp(prefix="raya-firstrun-"))
    load = load_average()
    shared = work / "cache"
    if args.cache == "warm":
        for side, sha in sides.items():
            for index, command in enumerate(COMMANDS):
                first_run(sha, command, shared, work, f"warm-up-{side}-{index}")
    runs: dict[tuple[str, str], list[Run]] = {}
    for round_ in range(args.rounds):
        order = list(sides.items())
        for side, sha in order if round_ % 2 == 0 else reversed(order):
            for index, command in enumerate(COMMANDS):
                label = f"{round_}-{side}-{index}"
                cache = shared if args.cache == "warm" else work / f"cache-{label}"
                run = first_run(sha, command, cache, work, label)
                runs.setdefault((side, command), []).append(run)
                print(f"  round {round_ + 1} {side} {command}: {run.seconds:.1f} s"
                      f" (silent {run.silence:.1f} s)", file=sys.stderr, flush=True)  # fmt: skip
    uv = shutil.which("uv") or "none"
    print(
        f"first run in a fresh clone, {args.rounds} rounds, median (min-max) wall clock;"
        f" {args.cache} pip/uv cache; uv on PATH: {uv}; {os.cpu_count()} cores,"
        f" load average {load} before, {load_average()} after; logs in {work}"
    )
    print(f"  {'command':<26} {'target':>6}  "
          + "  ".join(f"{side + ' ' + sha:<{WIDTH}}" for side, sha in sides.items()))  # fmt: skip
    for command, target in COMMANDS.items():
        cells = [f"{summary(runs[side, command]):<{WIDTH}}" for side in sides]
        print(f"  {command:<26} {target:4.0f} s  " + "  ".join(cells))
    for folder in work.glob("cache*"):
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
