"""Benchmark: how much CPU `raya --version`, `raya --help` and other commands take to start.

Not a test: it prints figures and ratios. Targets (issue 26): `raya --version` and
`raya --help` under 50 ms of CPU time; any other command at its own work within 100 ms
(`raya status --help` stands for that: the dispatch through Typer to the command's
module, with none of its work; `--every-command` measures each command's `--help` so).
Each command runs as its own process, like a user runs it, in paired rounds (see
bench/processes.py); the floor is `python -c pass` with the same interpreter.

    .venv/bin/python bench/startup.py [--rounds 21] [--every-command]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.processes

from bench.processes import compile_raya, load, paired, ratios, spread
from raya.commands.registry import COMMANDS

RAYA = str(Path(sys.executable).parent / "raya")  # the console script a user runs
TARGETS = {"raya --version": 0.050, "raya --help": 0.050}  # any other command: 100 ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="paired rounds")
    parser.add_argument("--every-command", action="store_true",
                        help="also each command's --help (target 100 ms each)")
    args = parser.parse_args()
    compile_raya()
    commands = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "raya --version": [RAYA, "--version"],
        "raya --help": [RAYA, "--help"],
        "raya status --help": [RAYA, "status", "--help"],
    }
    if args.every_command:
        commands |= {f"raya {name} --help": [RAYA, name, "--help"] for name in COMMANDS}
    before = load()
    times = paired(commands, args.rounds)
    print(f"start-up, {args.rounds} paired rounds, CPU time of the process (min median max);"
          f" {before} before, {load()} after")
    floor = times["python -c pass (floor)"]
    for label, seconds in times.items():
        line = f"  {label:<24} {spread(seconds)}  x floor {ratios(seconds, floor)}"
        target = TARGETS.get(label, 0.100)
        if label != "python -c pass (floor)":
            line += f"  x target {target * 1000:.0f} ms {ratios(seconds, [target] * len(seconds))}"
        print(line)


if __name__ == "__main__":
    main()
