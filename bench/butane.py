"""Benchmark: how many node-sized Butane configs per second `raya.butane` transpiles.

Not a test: it prints figures. The configs are the ones `raya render --example` writes
(control plane + 3 agents, about 16 KB of Butane on average), rendered with several sets of
throwaway secrets so that no two are alike. Target: 500 configs/s on one core.

Then, as processes (issue 26's target: CPU ratio <= 1.0), `raya butane --strict FILE`
against the real `butane --strict FILE` on the example control plane's config, in paired
rounds (bench/processes.py): both figures and their ratio, measured here, never assumed.
With them, the floor of a pure-Python `raya butane` on that file: the interpreter with `re`
(`python -c "import re"`, paired in the same rounds: pip's console script imports `re`
before raya runs) plus, in-process, the Go gzip model on the file's contents and libyaml's C
composer reading it (bench/shares.py); and the same with the bare interpreter (`python -I -S
-c pass`: no site, so no installed package, and no `re`), which no installed command gets
under. A floor over the real Butane means no Python code around those two parts can reach
the ratio. Last, raya's own floor: the bare interpreter importing the transpiler
(`raya.butane` from this tree's src), nothing transpiled.
The real Butane is `--butane` (default: ../shared/tools/butane/butane beside the
repository, else PATH); without one, no ratio is printed. With `--before SRC` (another
checkout's `src`, e.g. /work/main/src), `raya butane` from those sources runs in the same
rounds, so a change is measured against what it changes on the same busy machine. Not part
of the tests: CI has no real Butane.

    .venv/bin/python bench/butane.py [--sets 10] [--rounds 9] [--butane PATH] [--pairs 21]
                                     [--before SRC]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.processes

from bench.processes import checkouts, load, paired, ratios, spread
from bench.shares import compose_seconds, timing
from raya.butane import ButaneDiagnostics, dataurl, transpile
from raya.model.pins import load_chart_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import generate_example_secrets
from raya.nodes.render import render_cluster

TARGET = 500.0
REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "tests" / "butane" / "vectors"
# ../shared beside the main checkout (one level further up from a worktree under wt/).
SHARED_BUTANE = next((found for up in REPO.parents[:2]
                      if (found := up / "shared" / "tools" / "butane" / "butane").exists()), None)
RAYA = str(Path(sys.executable).parent / "raya")  # the console script a user runs
# The interpreter as pip's console script starts it (site, then `re`), and bare.
INTERPRETERS = {'python -c "import re"': [sys.executable, "-c", "import re"],
                "python -I -S -c pass": [sys.executable, "-I", "-S", "-c", "pass"]}


def example_configs(sets: int) -> list[str]:
    """The example project's Butane configs (control plane first), `sets` times over,
    each time with fresh throwaway secrets."""
    cluster = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    names = [node.name for node in cluster.nodes]
    charts = load_chart_pins(EXAMPLE_ROOT)
    return [
        node.butane
        for _ in range(sets)
        for node in render_cluster(
            cluster, generate_example_secrets(names), charts=charts, volume_id="1"
        )
    ]


def transpiles(text: str, files_dir: Path) -> bool:
    try:
        transpile(text, files_dir)
    except ButaneDiagnostics:
        return False
    return True


def rate(texts: list[str], files_dir: Path | None, rounds: int) -> tuple[float, float]:
    """Configs per second of CPU time and of wall-clock time, best of `rounds` passes.

    CPU time is the figure for "one core": on a shared machine the wall clock also
    counts the time other processes held the core. Each pass starts with an empty
    compression cache, as a fresh process would: without that, every pass after the
    first would only look up what the first one compressed.
    """
    best_cpu = best_wall = float("inf")
    for _ in range(rounds):
        dataurl._gzip_if_shorter.cache_clear()
        wall, cpu = time.perf_counter(), time.process_time()
        for text in texts:
            transpile(text, files_dir)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return len(texts) / best_cpu, len(texts) / best_wall


def floor_in_process(config: str, rounds: int) -> float:
    """CPU seconds of what transpiling `config` cannot skip: the Go gzip model on its files
    and libyaml composing it (best of `rounds`, the compression cache emptied each time, as
    in a fresh process)."""
    best = float("inf")
    for _ in range(rounds):
        dataurl._gzip_if_shorter.cache_clear()
        with timing(dataurl, "gzip_if_shorter") as gzip:
            transpile(config)
        best = min(best, gzip.seconds + compose_seconds([config]))
    return best


def as_processes(butane: str, config: str, pairs: int, before: Path | None) -> None:
    """`raya butane --strict FILE` against the real Butane (and, with `before`, raya from
    other sources), paired, CPU time."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "control-plane.bu"
        path.write_text(config)
        commands = {"real butane": [butane, "--strict", str(path)]} | INTERPRETERS
        commands["importing raya.butane"] = [
            sys.executable, "-I", "-S", "-c",
            f"import sys; sys.path.insert(0, {str(REPO / 'src')!r}); import raya.butane",
        ]
        for label, prefix in checkouts(before).items():
            commands[f"raya butane ({label})"] = [*prefix, RAYA, "butane", "--strict", str(path)]
        start = load()
        times = paired(commands, pairs)
    print(f"as processes, `--strict FILE` on the example control plane ({len(config):,} B), "
          f"{pairs} paired rounds, CPU time (min median max); {start} before, {load()} after")
    real = times.pop("real butane")
    print(f"  real butane ({butane}) {spread(real)}")
    in_process = floor_in_process(config, pairs)
    for label in INTERPRETERS:
        floor = [seconds + in_process for seconds in times.pop(label)]
        print(f"  floor: `{label}` + {in_process * 1000:.1f} ms in-process (Go gzip model and "
              f"libyaml composing, best of {pairs}) {spread(floor)}")
        print(f"    / real butane: {ratios(floor, real)} (paired ratios: min median max; over "
              "1.0, no Python around these two parts meets the target)")
    importing = times.pop("importing raya.butane")
    print(f"  `python -I -S`, import raya.butane alone {spread(importing)}")
    print(f"    / real butane: {ratios(importing, real)} (paired ratios: min median max)")
    for label, seconds in times.items():
        print(f"  {label} {spread(seconds)}")
        print(f"    / real butane: {ratios(seconds, real)} (paired ratios: min median max; "
              "target <= 1.0)")
    if before is not None:
        mine, theirs = times["raya butane (this tree)"], times["raya butane (before)"]
        print(f"  this tree / before: {ratios(mine, theirs)} (paired ratios: min median max)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=10,
                        help="secret sets to render the example with (4 configs each)")
    parser.add_argument("--rounds", type=int, default=9, help="passes; the best one counts")
    parser.add_argument("--butane", default=str(SHARED_BUTANE) if SHARED_BUTANE
                        else shutil.which("butane"), help="the real butane binary to compare "
                        "with (default: ../shared/tools/butane/butane, else PATH)")
    parser.add_argument("--pairs", type=int, default=21, help="paired rounds as processes")
    parser.add_argument("--before", type=Path, help="another checkout's src whose `raya "
                        "butane` runs in the same rounds, e.g. /work/main/src")
    args = parser.parse_args()

    nodes = example_configs(args.sets)
    butane = sum(map(len, nodes)) / len(nodes)
    ignition = sum(len(transpile(text)) for text in nodes) / len(nodes)
    node_rate, node_wall = rate(nodes, None, args.rounds)
    print(f"node configs (`raya render --example`): {len(nodes)} x {butane:,.0f} B of Butane "
          f"on average -> {ignition:,.0f} B of Ignition")
    print(f"  {node_rate:,.0f} configs/s of CPU time ({1000 / node_rate:.2f} ms each), "
          f"{node_wall:,.0f}/s wall clock (best of {args.rounds} passes, one process)")
    print(f"  target {TARGET:,.0f}/s: {node_rate / TARGET:.2f}x it")
    texts = [text for text in map(Path.read_text, sorted((VECTORS / "cases").glob("*.bu")))
             if transpiles(text, VECTORS / "files")]
    vector_rate, _ = rate(texts, VECTORS / "files", args.rounds)
    print(f"butane vectors raya transpiles: {len(texts)} cases, {vector_rate:,.0f} configs/s "
          "of CPU time (mostly small configs, some with local files)")
    if args.butane:
        as_processes(args.butane, nodes[0], args.pairs, args.before)
    else:
        print("real butane: not found (--butane, ../shared/tools/butane/butane or PATH); "
              "no process comparison")


if __name__ == "__main__":
    main()
