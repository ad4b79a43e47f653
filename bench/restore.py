"""Disaster recovery in the boot simulator: how long the drill takes, from `raya restore` to
every control plane serving its API again on the restored datastore, and from a control
plane booting on a blank volume (tests/boot/restore.py: 1 and 3 control planes, and 3 whose
first came back blank and joined a peer, booting at the same time).

Measured: the first control plane's boot on a blank volume (formatted, seeded, k3s started),
raya's check and download of a 4 MiB snapshot from an S3 server on 127.0.0.1, each command
of the restore on its node (stop, copy over stdin, sha256 check, the join drop-in removed,
reset, start, rejoin), and when each control plane's k3s served its API again.
Not measured (absent here): Hetzner's server and volume creation, Pulumi, FCOS' own boot
(firmware, kernel, Ignition in the initramfs), the download from GCS over the internet and
the upload over SSH to Hetzner, and the real k3s: its etcd restore and start (the stand-in
resets at once), a learner's promotion and the kubelets' return to Ready.

Usage (root, with scripts/install-tools' packages): .venv/bin/python bench/restore.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.boot.restore import CASES, SNAPSHOT_SIZE, RestoreRun, restore_group, served_again
from tests.boot.scenarios import k3s_unit
from tests.boot.sim import BootedNode, booted_at_once, debian_root
from tests.operate.s3 import s3_server

WIDTH = 66


def _line(what: str, seconds: float) -> None:
    print(f"  {what:{WIDTH}} {seconds:7.2f} s")


def _report(case: str, nodes: dict[str, BootedNode], run: RestoreRun) -> None:
    print(f"\n{case}, and one agent")
    if run.error or run.booted is None or run.checked is None or run.done is None:
        print(f"  restore did not complete: {run.error or 'the fleet never booted'}")
        return
    first = nodes[run.control_planes[0]]
    boot = first.job_done(k3s_unit(first))
    boot_s = boot.at if boot else float("nan")
    _line("first control plane: boot on a blank volume to k3s running", boot_s)
    download = run.checked - run.booted
    _line(f"check and download the snapshot ({SNAPSHOT_SIZE // 2**20} MiB, local S3)", download)
    for ran in run.ran:
        _line(f"{ran.node}: {' '.join(ran.command)}"[:WIDTH], ran.ended - ran.started)
    steps = run.done - run.checked
    _line("the restore commands, in all", steps)
    again = served_again(nodes, run)
    if len(again) < len(run.control_planes):
        print(f"  not served again: {sorted(set(run.control_planes) - set(again))}")
        return
    api = again[run.control_planes[0]] - run.booted
    every = max(again.values()) - run.booted
    _line("`raya restore` to the API served again (the reset control plane)", api)
    _line("`raya restore` to every control plane serving its API again", every)
    _line("measured in all (boot + the drill)", boot_s + every)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    started = time.monotonic()
    debian_root()
    print(f"Debian root ready in {time.monotonic() - started:.1f} s; load {_load()}")
    with s3_server() as s3:
        groups = {case: restore_group(count, s3, blank) for case, (count, blank) in CASES.items()}
        with booted_at_once([fleet for fleet, _ in groups.values()]) as booted:
            for (case, (_, run)), nodes in zip(groups.items(), booted, strict=True):
                _report(case, nodes, run)
    print(f"\nwall time {time.monotonic() - started:.1f} s, the {len(CASES)} scenarios at once "
          f"on {os.cpu_count()} cores; load {_load()}")  # fmt: skip


if __name__ == "__main__":
    main()
