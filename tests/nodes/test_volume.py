"""The control plane's state survives its VM: the volume script and the seeding commands as
the control plane's config carries them, run for real against a loop device standing for
the Hetzner volume. A blank volume is formatted with raya's label; raya's filesystem is kept
byte for byte; anything else is refused and not touched; a volume attached late is waited
for. Seeding puts the CA pairs and manifests onto the volume and keeps what k3s wrote.

The units around them (the device waited for without a deadline, k3s only on the mounted
volume, a volume that never comes) are booted in tests/boot.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from raya.model.fleet import Cluster
from raya.nodes.identity import ClusterSecrets
from raya.nodes.render import K3S_SERVER_DIR, VOLUME_LABEL, render_node, volume_device
from tests.nodes.conftest import CHARTS
from tests.nodes.tools import device_files, ignition_files, probe_device
from tests.support import require_root, require_tool

pytestmark = pytest.mark.tools

MiB = 1024 * 1024
SCRIPT = "/usr/local/bin/raya-k3s-volume"
SEED = "/var/lib/raya/k3s-server-seed"


@dataclass
class Volume:
    id: str
    loop: str
    backing: Path

    @property
    def link(self) -> Path:
        return Path(volume_device(self.id))

    def digest(self) -> str:
        return hashlib.sha256(self.backing.read_bytes()).hexdigest()

    def probe(self) -> dict[str, str]:
        return probe_device(self.loop)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=120)


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Volume]:
    """An empty 64 MiB volume on a loop device, its by-id link not made yet (attach())."""
    for tool in ("losetup", "mkfs.ext4", "blkid", "wipefs", "mount", "umount", "mkswap"):
        require_tool(tool)
    require_root("the volume tests (loop devices, mount)")
    backing = tmp_path / "volume.img"
    with backing.open("wb") as handle:
        handle.truncate(64 * MiB)
    loop = run("losetup", "--find", "--show", str(backing)).stdout.strip()
    volume_id = str(900_000_000 + os.getpid() % 100_000_000)  # unique on this machine
    volume = Volume(volume_id, loop, backing)
    created = [p for p in (volume.link.parent.parent, volume.link.parent) if not p.exists()]
    try:
        yield volume
    finally:
        volume.link.unlink(missing_ok=True)
        for folder in reversed(created):
            folder.rmdir()
        for line in Path("/proc/mounts").read_text().splitlines():
            if line.split()[0] == loop:
                subprocess.run(["umount", line.split()[1]], check=False)
        subprocess.run(["losetup", "--detach", loop], check=False)


def attach(volume: Volume) -> None:
    """What udev does when Hetzner attaches the volume: the by-id link appears."""
    volume.link.parent.mkdir(parents=True, exist_ok=True)
    volume.link.symlink_to(volume.loop)


@pytest.fixture
def config(cluster: Cluster, secrets: ClusterSecrets, volume: Volume) -> bytes:
    node = render_node(cluster, cluster.control_plane, secrets, charts=CHARTS, volume_id=volume.id)
    return node.ignition


@pytest.fixture
def script(config: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "raya-k3s-volume"
    path.write_bytes(ignition_files(config)[SCRIPT])
    path.chmod(0o755)
    return path


def exec_start(config: bytes, unit: str) -> list[list[str]]:
    units = {u["name"]: u.get("contents", "") for u in json.loads(config)["systemd"]["units"]}
    return [
        shlex.split(line.removeprefix("ExecStart="))
        for line in units[unit].splitlines()
        if line.startswith("ExecStart=")
    ]


def prepare(config: bytes, script: Path, volume: Volume) -> subprocess.CompletedProcess[str]:
    """The volume unit's command as rendered, with the script from the same config."""
    ((command, *arguments),) = exec_start(config, "raya-k3s-volume.service")
    assert command == SCRIPT and arguments == [str(volume.link), VOLUME_LABEL]
    return subprocess.run(
        [str(script), *arguments], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_blank_volume_is_formatted_with_raya_label(
    config: bytes, script: Path, volume: Volume
) -> None:
    attach(volume)
    result = prepare(config, script, volume)
    assert result.returncode == 0, result.stderr
    assert f"{volume.link} is blank: formatting it ext4, labelled raya-k3s-server" in result.stdout
    probe = volume.probe()
    assert (probe["TYPE"], probe["LABEL"]) == ("ext4", "raya-k3s-server")


def test_raya_filesystem_is_kept_byte_for_byte(config: bytes, script: Path, volume: Volume) -> None:
    attach(volume)
    assert prepare(config, script, volume).returncode == 0
    before = volume.digest()
    result = prepare(config, script, volume)
    assert result.returncode == 0, result.stderr
    assert "holds raya's filesystem (raya-k3s-server): keeping it" in result.stdout
    assert volume.digest() == before


@pytest.mark.parametrize(
    "make",
    [
        ["mkfs.ext4", "-q", "-F", "-L", "someone-else"],  # another cluster's, a hand-made one
        ["mkfs.ext4", "-q", "-F"],  # an ext4 without a label
        ["mkswap"],
    ],
    ids=["ext4 of another label", "ext4 without label", "swap"],
)
def test_anything_else_is_refused_and_not_touched(
    config: bytes, script: Path, volume: Volume, make: list[str]
) -> None:
    run(*make, volume.loop)
    before = volume.digest()
    attach(volume)
    result = prepare(config, script, volume)
    assert result.returncode == 1
    assert f"{volume.link} holds something else, not an ext4 labelled raya-k3s-server" in (
        result.stderr
    )
    assert "left untouched; k3s stays stopped" in result.stderr
    assert volume.digest() == before


def test_a_late_volume_is_waited_for_and_said_so(
    config: bytes, script: Path, volume: Volume
) -> None:
    later = threading.Timer(3, attach, (volume,))
    later.start()
    started = time.monotonic()
    try:
        result = prepare(config, script, volume)
    finally:
        later.cancel()
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started >= 3
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"raya-k3s-volume: waiting for {volume.link} (the control plane's volume) to be "
        "attached; k3s starts once it is mounted"
    )
    assert lines[1].startswith(f"raya-k3s-volume: {volume.link} attached after ")
    assert volume.probe()["LABEL"] == "raya-k3s-server"


def test_seeding_puts_the_cas_on_the_volume_and_keeps_what_k3s_wrote(
    config: bytes, script: Path, volume: Volume, tmp_path: Path
) -> None:
    """A first VM, then a replacement (a fresh root disk, the same volume): each copies its
    seed onto the volume with the seed unit's own commands (paths under a scratch root)."""
    attach(volume)
    files = ignition_files(config)
    seeded = {p.removeprefix(f"{SEED}/"): d for p, d in files.items() if p.startswith(SEED)}
    assert {"tls/server-ca.crt", "tls/server-ca.key", "tls/client-ca.crt", "tls/client-ca.key"} < (
        set(seeded)
    )
    mounted = tmp_path / "server"
    mounted.mkdir()

    storage = json.loads(config)["storage"]
    modes = {e["path"]: e["mode"] for e in storage["files"] + storage["directories"]}

    def boot(vm: str) -> None:
        root = tmp_path / vm
        for path, data in seeded.items():  # as Ignition writes them, modes included
            target = root / SEED.lstrip("/") / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(modes[f"{SEED}/{path}"])
        for folder in (SEED, f"{SEED}/tls", f"{SEED}/manifests"):
            (root / folder.lstrip("/")).chmod(modes[folder])
        assert prepare(config, script, volume).returncode == 0
        run("mount", volume.loop, str(mounted))
        try:
            for command in exec_start(config, "raya-k3s-seed.service"):
                swapped = [
                    arg.replace(SEED, f"{root}{SEED}").replace(K3S_SERVER_DIR, str(mounted))
                    for arg in command
                ]
                run(*swapped)
        finally:
            run("umount", str(mounted))
        assert not (root / SEED.lstrip("/")).exists()  # the keys leave the root disk

    boot("first")
    first = device_files(volume.loop)
    assert first == seeded
    run("mount", volume.loop, str(mounted))
    k3s_wrote = {"db/state.db": os.urandom(64 * 1024), "tls/service.key": b"k3s's own\n"}
    try:
        assert (mounted / "tls").stat().st_mode & 0o777 == 0o700
        assert (mounted / "tls/server-ca.key").stat().st_mode & 0o777 == 0o600
        for path, data in k3s_wrote.items():
            (mounted / path).parent.mkdir(parents=True, exist_ok=True)
            (mounted / path).write_bytes(data)
    finally:
        run("umount", str(mounted))
    boot("replacement")
    assert device_files(volume.loop) == {**seeded, **k3s_wrote}
