"""Benchmark: how much CPU `raya --version`, `raya --help` and each command take to start.

Not a test: it prints figures and ratios. Targets (issue 26): `raya --version` and
`raya --help` under 50 ms of CPU time; every other command at its own work within 100 ms.

"At its own work" is measured by running each command so that its first own step fails at
once (`at_work`): `--root` naming a folder that does not exist for the commands that read
a project (the first thing each does is check it), a file that does not exist for
`raya butane` (read before the transpiler is loaded). So the figure is the whole process:
start, dispatch, the command's module, its options parsed, its first step, the one-line
error and exit 1; nothing of the work itself. `--every-command` also measures each
command's `--help`. Each command runs as its own process, like a user runs it, in paired
rounds (see bench/processes.py); the floor is `python -c pass` with the same interpreter.

    .venv/bin/python bench/startup.py [--rounds 21] [--every-command]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.processes

from bench.processes import compile_raya, load, paired, ratios, spread
from raya.commands.parser import Command
from raya.commands.registry import every_command

RAYA = str(Path(sys.executable).parent / "raya")  # the console script a user runs
TARGETS = {"raya --version": 0.050, "raya --help": 0.050}  # any other command: 100 ms
MISSING = "/nonexistent/raya-bench"  # a folder (and file) that does not exist


def at_work(path: tuple[str, ...], command: Command) -> list[str]:
    """Arguments that make `raya PATH` fail at its first own step: a made-up value for
    each required argument, and `--root` naming a missing folder (or, without --root, the
    first argument: `raya butane`'s file) that the first step reads."""
    required = [argument.dest for argument in command.arguments if argument.required]
    if any("--root" in option.names for option in command.options):
        return [*path, *required, "--root", MISSING]
    return [*path, f"{MISSING}.bu"]


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
    }
    working = {f"raya {' '.join(path)} at work": [RAYA, *at_work(path, command)]
               for path, command in every_command()}  # fmt: skip
    commands |= working
    if args.every_command:
        commands |= {f"raya {' '.join(path)} --help": [RAYA, *path, "--help"]
                     for path, _ in every_command()}  # fmt: skip
    before = load()
    times = paired(commands, args.rounds, failing=frozenset(working))
    print(f"start-up, {args.rounds} paired rounds, CPU time of the process (min median max);"
          f" {before} before, {load()} after")
    floor = times["python -c pass (floor)"]
    for label, seconds in times.items():
        line = f"  {label:<32} {spread(seconds)}  x floor {ratios(seconds, floor)}"
        target = TARGETS.get(label, 0.100)
        if label != "python -c pass (floor)":
            line += f"  x target {target * 1000:.0f} ms {ratios(seconds, [target] * len(seconds))}"
        print(line)


if __name__ == "__main__":
    main()
