"""A stand-in `pulumi` CLI: answers the Automation API SDK from recorded CLI output.

What it proves, and all it proves: how raya's calls, through the real Automation API SDK,
become CLI command lines and environment (`--replace <urn>`, `--event-log`, `--color never`,
`stack export/import`, the program's environment variables), and how the SDK's answers come
back to raya (the display passed through line by line, change counts read from the engine
events, secret outputs masked, the CLI's `error:` line). The deployment it replays is another
program's (a recorded `pulumi up` of an AWS EKS stack, `recorded/README.md`): nothing here says
what the engine would do with raya's program. That is `engine.py`'s part: the engine model
runs raya's program and plans its replacements as the engine does.

Run as `python -m tests.cloud.program.standin_pulumi ARGS` by a wrapper script named `pulumi`.
Each invocation appends its arguments (JSON, one line) to $STANDIN_LOG: that is the record of
what raya, through the real SDK, asked of the CLI; a stack operation also logs
`["env", {RAYA_REPLACE: ...}]`, the program's environment as the CLI received it. Stack
operations print the recorded display (`recorded/up-3.stdout.txt`) and write the recorded
engine events to `--event-log`; stack `failing` fails the way the CLI does (exit 255,
`error:` lines). Outputs come from
$STANDIN_OUTPUTS (`{"name": [value, secret]}`), masked the way `stack output --json` masks.
`stack export` answers a state with a protected control plane; what `stack import` is given
is logged as `["imported", state]`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

RECORDED = Path(__file__).parent / "recorded"
VERSION = "v3.200.0"  # file event logs (the SDK switches to gRPC above 3.205)
EVENTS = RECORDED / "up-3.events.jsonl"


def recorded_changes() -> dict[str, int]:
    for line in EVENTS.read_text().splitlines():
        event = json.loads(line)
        if "summaryEvent" in event:
            changes: dict[str, int] = event["summaryEvent"]["resourceChanges"]
            return changes
    raise AssertionError("no summary event in the recording")


def option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def main(args: list[str]) -> int:
    # The SDK puts this first on every command line; the rest is what was asked.
    if args[:1] == ["--non-interactive"]:
        args = args[1:]
    with open(os.environ["STANDIN_LOG"], "a") as log:
        log.write(json.dumps(args) + "\n")
    stack = option(args, "--stack")
    if args[:1] == ["version"]:
        print(VERSION)
    elif args[:2] == ["stack", "select"] and stack not in os.environ["STANDIN_STACKS"].split():
        print(f"error: no stack named '{stack}' found", file=sys.stderr)
        return 255
    elif args[:1] in (["preview"], ["up"], ["destroy"]):
        with open(os.environ["STANDIN_LOG"], "a") as log:
            log.write(json.dumps(["env", {"RAYA_REPLACE": os.environ.get("RAYA_REPLACE")}]) + "\n")
        sys.stdout.write((RECORDED / "up-3.stdout.txt").read_text())
        if event_log := option(args, "--event-log"):
            shutil.copyfile(EVENTS, event_log)
        if stack == "failing":
            print("error: hcloud: server type cx99 not found", file=sys.stderr)
            return 255
    elif args[:2] == ["stack", "output"]:
        outputs = json.loads(os.environ.get("STANDIN_OUTPUTS", "{}"))
        shown = "--show-secrets" in args
        print(json.dumps({name: value if shown or not secret else "[secret]"
                          for name, (value, secret) in outputs.items()}))
    elif args[:2] == ["stack", "export"]:
        # A state whose control plane is protected, as the program leaves it.
        print(json.dumps({"version": 3, "deployment": {"resources": [
            {"urn": "urn:pulumi:prod::raya::hcloud:index/server:Server::control-plane",
             "type": "hcloud:index/server:Server", "protect": True},
            {"urn": "urn:pulumi:prod::raya::hcloud:index/server:Server::agent-0",
             "type": "hcloud:index/server:Server"},
        ]}}))
    elif args[:2] == ["stack", "import"]:
        imported = Path(str(option(args, "--file"))).read_text()
        with open(os.environ["STANDIN_LOG"], "a") as log:
            log.write(json.dumps(["imported", json.loads(imported)]) + "\n")
    elif args[:2] == ["stack", "history"]:
        print(json.dumps([{
            "kind": "update", "startTime": "2022-04-01T07:30:53.000000Z", "message": "",
            "environment": {}, "config": {}, "result": "succeeded",
            "endTime": "2022-04-01T07:39:15.000000Z", "version": 1,
            "resourceChanges": recorded_changes(),
        }]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
