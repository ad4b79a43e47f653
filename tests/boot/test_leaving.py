"""What raya runs on a leaving control plane before its etcd member is removed
(`raya.operate.remove.DISARM`, then `STOP`), under real systemd in a booted container: k3s
keeps running until it exits on its own, as k3s does once its member is removed (k3s
`pkg/daemons/executor/embed.go`, `ETCD`: a tombstone, then the process ends), and then
nothing starts it again: not `Restart=always`, not a start asked for, not the next boot.

The k3s here is a shell loop with raya's `Restart=always` (src/raya/nodes/templates/snippets/
k3s.service.j2; `RestartSec=1s` instead of 5 s, to keep the test short) that counts its starts
and exits when told its member was removed. Without DISARM, systemd starts it again: the
restart that lets a removed member rejoin etcd (k3s-io/k3s#5404)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from raya.operate import remove as rm
from tests.boot.sim import BootedNode, NodePlan, debian_root, launch, shutdown
from tests.nodes.tools import SELINUX_STUB, apply_ignition, fcos_layout
from tests.support import require_root, require_tool

REMOVED = "/run/test-member-removed"  # the fake k3s exits when this appears
STARTS = "/var/lib/test-k3s-starts"  # one line per start
K3S = f"""[Unit]
Description=k3s server (a stand-in that exits when its member is removed)

[Service]
Type=simple
Restart=always
RestartSec=1s
ExecStart=/bin/sh -c 'echo start >>{STARTS}; while [ ! -e {REMOVED} ]; do sleep 0.2; done; \
rm -f {REMOVED}; exit 1'

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(scope="module")
def node() -> Iterator[BootedNode]:
    for tool in ("debootstrap", "systemd-nspawn", "ip", "nsenter"):
        require_tool(tool)
    require_root("the boot tests (namespaces, mounts, nspawn)")
    ignition = {
        "ignition": {"version": "3.3.0"},
        "systemd": {"units": [{"name": rm.K3S_UNIT, "enabled": True, "contents": K3S}]},
    }
    plan = NodePlan("leaving", json.dumps(ignition).encode(), ipaddress.IPv4Address("10.0.1.14"))
    namespace = f"raya-leaving-{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    booted = BootedNode(plan, namespace, Path(tempfile.mkdtemp(prefix="raya-boot-leaving-")))
    try:
        for name in ("upper", "work", "merged"):
            (booted.folder / name).mkdir()
        lower, folder = debian_root(), booted.folder
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={lower},upperdir={folder / 'upper'},workdir={folder / 'work'}",
             str(booted.root)],
            check=True,
        )  # fmt: skip
        fcos_layout(booted.root)  # as sim.prepare_node: FCOS' layout for Ignition, then
        apply_ignition(plan.ignition, booted.root)
        for stub in SELINUX_STUB:
            (booted.root / stub).unlink()
        # Ignition enables a unit through a preset, which FCOS applies at first boot.
        subprocess.run(["systemctl", f"--root={booted.root}", "preset", rm.K3S_UNIT], check=True)
        (booted.root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
        launch(booted)
        deadline = time.monotonic() + 120
        while True:
            try:
                if booted.inside_status("systemctl", "is-active", rm.K3S_UNIT) == "active":
                    break
            except RuntimeError:  # its systemd not there yet
                pass
            assert time.monotonic() < deadline, "k3s never started in the container"
            time.sleep(0.5)
        yield booted
    finally:
        shutdown(booted)
        subprocess.run(["ip", "netns", "delete", namespace], check=False)


def starts(node: BootedNode) -> int:
    return len(node.inside("cat", STARTS).splitlines())


def member_removed(node: BootedNode, seconds: float) -> str:
    """k3s exits, as on its member's removal; `seconds` later, its unit's state."""
    node.inside("touch", REMOVED)
    time.sleep(seconds)
    return node.inside_status("systemctl", "is-active", rm.K3S_UNIT)


def test_a_leaving_control_planes_k3s_never_starts_again_once_disabled(
    node: BootedNode,
) -> None:
    # As k3s runs on every control plane: removed, it exits and systemd starts it again.
    assert starts(node) == 1
    assert member_removed(node, 3) == "active"
    assert starts(node) == 2
    # raya's DISARM, as sent (sudo sh -c ...): k3s keeps running, and voting, until then.
    node.inside(*rm.DISARM)
    assert node.inside_status("systemctl", "is-active", rm.K3S_UNIT) == "active"
    assert node.inside_status("systemctl", "is-enabled", rm.K3S_UNIT) == "disabled"
    # Its member removed, it exits and stays down; a start asked for does not start it.
    assert member_removed(node, 3) in ("inactive", "failed")
    node.inside_status("systemctl", "start", rm.K3S_UNIT)
    time.sleep(2)
    assert node.inside_status("systemctl", "is-active", rm.K3S_UNIT) in ("inactive", "failed")
    assert starts(node) == 2
    # STOP, after the removal, finds nothing to stop and succeeds.
    node.inside(*rm.STOP)
    assert starts(node) == 2
