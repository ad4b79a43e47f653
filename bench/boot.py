"""Boot the boot tests' scenarios (tests/boot/scenarios.py) and print, per node, when it
reached each step, what its k3s saw at start, and how long the whole run took.

Usage (root, with scripts/install-tools' packages): .venv/bin/python bench/boot.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.boot.scenarios import FLEET, VOLUMES, boot_everything, timings
from tests.boot.sim import BootedNode, debian_root


def _k3s_said(node: BootedNode, prefix: str) -> str:
    said = [event for event in node.logged("k3s") if event.message.startswith(prefix)]
    return said[0].message.removeprefix(prefix).strip() if said else "-"


def _table(nodes: dict[str, BootedNode], what: dict[str, str]) -> None:
    print(
        f"{'node':14} {'scenario':38} {'online':>7} {'ipv4':>7} {'keys':>7} {'k3s':>7}"
        "  k3s saw enp7s0"
    )
    for name, node in nodes.items():
        steps = timings(node)
        cells = " ".join(f"{'-' if v is None else f'{v:.2f}':>7}" for v in steps.values())
        seen = _k3s_said(node, "enp7s0 addresses at start:")
        print(f"{name:14} {what.get(name, ''):38} {cells}  {seen}")
        joined = _k3s_said(node, "joined")
        refused = _k3s_said(node, "join refused by")
        if node.plan.volume is None:
            print(f"{'':14} join: {joined if joined != '-' else refused}")


def main() -> None:
    started = time.monotonic()
    debian_root()
    print(f"Debian root ready in {time.monotonic() - started:.1f} s")
    begun = time.monotonic()
    with boot_everything() as boots:
        print(f"every scenario booted (at once) and stopped in {time.monotonic() - begun:.1f} s")
        _table(boots.fleet, {scenario.node: scenario.what for scenario in FLEET})
        _table(boots.impostor, {"control-plane": "control plane with another CA"})
        _table(boots.volumes, {scenario.node: scenario.what for scenario in VOLUMES})
    print(f"total {time.monotonic() - started:.1f} s (seconds are after each node's launch)")


if __name__ == "__main__":
    main()
