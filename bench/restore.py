"""Disaster recovery in the boot simulator: how long the steps raya runs take, from a control
plane booting on a blank volume to every control plane's k3s running again on the restored
datastore (tests/boot/restore.py, with 1 and 3 control planes booting at the same time).

Measured: the first control plane's boot on a blank volume (formatted, seeded, k3s started),
raya's check and download of a 4 MiB snapshot from an S3 server on 127.0.0.1, and each command
of the restore on its node (stop, copy over stdin, sha256 check, reset, start, rejoin).
Not measured (absent here): Hetzner's server and volume creation, Pulumi, FCOS' own boot
(firmware, kernel, Ignition in the initramfs), the download from GCS over the internet and
the upload over SSH to Hetzner, and the real k3s: its etcd restore and start (the stand-in
resets at once) and the kubelets' return to Ready.

Usage (root, with scripts/install-tools' packages): .venv/bin/python bench/restore.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.boot.restore import SNAPSHOT_SIZE, RestoreRun, restore_group
from tests.boot.scenarios import k3s_unit
from tests.boot.sim import BootedNode, booted_at_once, debian_root
from tests.operate.s3 import s3_server


def _report(count: int, nodes: dict[str, BootedNode], run: RestoreRun) -> None:
    print(f"\n{count} control plane(s) and one agent")
    if run.error or run.booted is None or run.checked is None or run.done is None:
        print(f"  restore did not complete: {run.error or 'the fleet never booted'}")
        return
    first = nodes[run.control_planes[0]]
    boot = first.job_done(k3s_unit(first))
    boot_s = boot.at if boot else float("nan")
    print(f"  {'first control plane: boot on a blank volume to k3s running':62} {boot_s:7.2f} s")
    download = run.checked - run.booted
    print(f"  {f'check and download the snapshot ({SNAPSHOT_SIZE // 2**20} MiB, local S3)':62}"
          f" {download:7.2f} s")  # fmt: skip
    for ran in run.ran:
        what = f"{ran.node}: {' '.join(ran.command)}"[:62]
        print(f"  {what:62} {ran.ended - ran.started:7.2f} s")
    steps = run.done - run.checked
    print(f"  {'the restore commands, in all':62} {steps:7.2f} s")
    print(f"  {'measured in all (boot + check, download + commands)':62} "
          f"{boot_s + download + steps:7.2f} s")  # fmt: skip


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    started = time.monotonic()
    debian_root()
    print(f"Debian root ready in {time.monotonic() - started:.1f} s; load {_load()}")
    with s3_server() as s3:
        groups = {count: restore_group(count, s3) for count in (1, 3)}
        with booted_at_once([fleet for fleet, _ in groups.values()]) as booted:
            for (count, (_, run)), nodes in zip(groups.items(), booted, strict=True):
                _report(count, nodes, run)
    print(f"\nwall time {time.monotonic() - started:.1f} s, both scenarios at once on "
          f"{os.cpu_count()} cores; load {_load()}")  # fmt: skip


if __name__ == "__main__":
    main()
