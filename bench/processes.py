"""Paired process timing for the start-up benchmarks: CPU time, min/median/max, load.

Each round runs every command once, one after the other, so that all see the same
moment of a shared machine; a ratio is taken within each round (paired), and its median
reported. CPU time (user + system of the child) is the figure: on a shared machine the
wall clock also counts the time other processes held the core.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src" / "raya"


def compile_raya() -> None:
    """Write raya's bytecode, as installing a wheel does: with PYTHONDONTWRITEBYTECODE set
    (as here), an editable install would otherwise compile its sources in every run."""
    compileall.compile_dir(SRC, quiet=1)


def cpu_time(argv: list[str], stdin: bytes | None = None, status: int = 0) -> float:
    """Seconds of CPU time `argv` took as a process; it must exit with `status`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL if status else None,
                          env=os.environ | {"COLUMNS": "80"})
    if done.returncode != status:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}, not {status}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def paired(
    commands: dict[str, list[str]], rounds: int, failing: frozenset[str] = frozenset()
) -> dict[str, list[float]]:
    """CPU seconds of each command in each round, every command once per round; those
    labelled in `failing` must exit with status 1, the others succeed."""
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(rounds):
        for label, argv in commands.items():
            times[label].append(cpu_time(argv, status=int(label in failing)))
    return times


def load() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def spread(seconds: list[float]) -> str:
    """min / median / max in ms."""
    low, mid, high = min(seconds), statistics.median(seconds), max(seconds)
    return f"{low * 1000:6.1f} {mid * 1000:6.1f} {high * 1000:6.1f} ms"


def ratios(numerator: list[float], denominator: list[float]) -> str:
    """min / median / max of the paired ratios."""
    each = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return f"{min(each):5.2f} {statistics.median(each):5.2f} {max(each):5.2f}"


def checkouts(before: Path | None) -> dict[str, list[str]]:
    """The sources a paired benchmark compares: this tree's and, with `before`, another
    checkout's `src` (read through PYTHONPATH, never written to), each as the argv prefix
    that runs a command with them. Both compiled first (see compile_raya)."""
    compile_raya()
    found: dict[str, list[str]] = {"this tree": []}
    if before is not None:
        compileall.compile_dir(before, quiet=1)
        found["before"] = ["env", f"PYTHONPATH={before}"]
    return found


# The fleets a benchmark's --scale measures: 5 control planes and this many agents, in the
# public mode (raya:network: public), the only one that holds more than 100 nodes.
SCALE_AGENTS = (100, 500, 1000)
SCALE_CONTROL_PLANES = 5


def arguments(description: str, rounds: int, scale: str | None = None) -> argparse.Namespace:
    """--rounds, --before and the hidden --child of a benchmark whose rounds run children;
    with `scale` (what it measures), --scale and the hidden --scale-child N too."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds, help="paired rounds")
    parser.add_argument("--before", type=Path, help="another checkout's src, to compare with")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    if scale is not None:
        parser.add_argument(
            "--scale",
            action="store_true",
            help=f"instead: {scale} for {SCALE_CONTROL_PLANES} control planes and "
            f"{', '.join(map(str, SCALE_AGENTS))} agents (raya:network: public), CPU time "
            "and peak memory, each fleet in a fresh process",
        )
        parser.add_argument("--scale-child", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def scale_child(script: str, agents: int) -> dict[str, Any]:
    """What `script --scale-child agents` printed last: one JSON line."""
    done = subprocess.run(
        [sys.executable, script, "--scale-child", str(agents)],
        check=True,
        capture_output=True,
        text=True,
    )
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def scale_table(title: str, rows: dict[int, dict[str, float]], parts: tuple[str, ...]) -> None:
    """Per fleet size: each part's CPU seconds and its growth against the smallest fleet,
    the peak memory before the work (imports, inputs) and at its end."""
    print(f"{title}: {SCALE_CONTROL_PLANES} control planes + N agents, raya:network: public; "
          f"one fresh process per fleet, CPU time; {load()}")  # fmt: skip
    first = rows[min(rows)]
    for agents, found in rows.items():
        nodes = agents + SCALE_CONTROL_PLANES
        cells = [f"N={agents:>5} ({nodes:>5} nodes)"]
        for part in parts:
            growth = found[part] / first[part] if first[part] else float("nan")
            cells.append(f"{part} {found[part] * 1000:9.2f} ms (x{growth:5.2f})")
        cells.append(f"memory {found['rss_before']:6.1f} -> {found['rss_peak']:6.1f} MiB")
        print("  " + "  ".join(cells))


def child(script: str, prefix: list[str]) -> dict[str, Any]:
    """What `script --child`, run with `prefix` (see checkouts), printed last: one JSON line."""
    done = subprocess.run(
        [*prefix, sys.executable, script, "--child"], check=True, capture_output=True, text=True
    )
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def scale_fleet(agents: int) -> Any:
    """The bundled example's cluster grown to SCALE_CONTROL_PLANES control planes and one pool
    of `agents` cx23 agents, in the public mode."""
    import ipaddress

    from raya.model.config import parse_stack_config
    from raya.model.fleet import Fleet, Pool, build_cluster
    from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster

    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK).config
    config = parse_stack_config(
        {
            "authorizedUsers": list(example.authorized_users),
            "managedSubdomain": example.managed_subdomain,
            "parentZone": example.parent_zone,
            "acmeEmail": example.acme_email,
            "nodesSubnet": "10.0.0.0/20",
            "controlPlaneIp": "10.0.0.10",
            "controlPlanes": SCALE_CONTROL_PLANES,
            "network": "public",
        },
        "bench",
    )
    pool = Pool("web", "cx23", agents, ipaddress.IPv4Network("10.0.4.0/22"))
    return build_cluster(config, Fleet(agents=(), pools=(pool,)), "bench")
