"""The control plane's state survives its VM: the real Ignition on a loop device standing
for the Hetzner volume. A first boot formats the empty volume and writes the CA pairs onto
it; a replacement VM (a fresh root, the same volume) keeps what k3s wrote in between byte
for byte and the CA files identical; a foreign filesystem fails loudly and is not touched.

The `disks` stage, which creates filesystems, cannot run here: it waits for its devices
through systemd over D-Bus (`/run/systemd/private`), and this machine runs no systemd. Its
part, as Ignition documents it for `wipeFilesystem: false` (docs/operator-notes, "Filesystem
reuse semantics"), is played by `disks_stage_stand_in`: create the filesystem on a blank
device, reuse one of the right type and label, fail otherwise. The real Ignition runs every
other stage: fetch-offline, mount, files, umount.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from raya.model.fleet import Cluster
from raya.nodes.identity import ClusterSecrets
from raya.nodes.render import K3S_SERVER_DIR, VOLUME_LABEL, render_node, volume_device
from tests.nodes.conftest import CHARTS
from tests.nodes.tools import IgnitionFailed, apply_ignition, ignition_files, scratch_root
from tests.support import require_root, require_tool

pytestmark = pytest.mark.tools

MiB = 1024 * 1024
BOOT = ("fetch-offline", "mount", "files", "umount")
TLS = f"{K3S_SERVER_DIR}/tls"
CA_FILES = [f"{TLS}/{name}" for name in ("server-ca.crt", "server-ca.key", "client-ca.crt",
                                          "client-ca.key")]  # fmt: skip


@dataclass
class Volume:
    id: str
    loop: str
    backing: Path

    def digest(self) -> str:
        return hashlib.sha256(self.backing.read_bytes()).hexdigest()


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, timeout=120)


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Volume]:
    """An empty 64 MiB volume on a loop device, at the by-id path Hetzner gives it."""
    for tool in ("losetup", "mkfs.ext4", "blkid", "mount", "umount", "mkswap"):
        require_tool(tool)
    require_root("the volume tests (loop devices, mount)")
    backing = tmp_path / "volume.img"
    with backing.open("wb") as handle:
        handle.truncate(64 * MiB)
    loop = run("losetup", "--find", "--show", str(backing)).stdout.strip()
    volume_id = str(900_000_000 + os.getpid() % 100_000_000)  # unique on this machine
    link = Path(volume_device(volume_id))
    created = [p for p in (link.parent.parent, link.parent) if not p.exists()]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(loop)
    try:
        yield Volume(volume_id, loop, backing)
    finally:
        link.unlink()
        for folder in reversed(created):
            folder.rmdir()
        for line in Path("/proc/mounts").read_text().splitlines():
            if line.split()[0] in (loop, str(link)):
                subprocess.run(["umount", line.split()[1]], check=False)
        subprocess.run(["losetup", "--detach", loop], check=False)


def disks_stage_stand_in(device: str, label: str) -> str:
    """What Ignition's disks stage does for an ext4 filesystem with wipeFilesystem false."""
    probe = subprocess.run(
        ["blkid", "-p", "-o", "export", device], capture_output=True, text=True, check=False
    )
    found = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    if "TYPE" not in found:
        run("mkfs.ext4", "-q", "-F", "-L", label, device)
        return "created"
    if (found["TYPE"], found.get("LABEL")) == ("ext4", label):
        return "reused"
    raise IgnitionFailed("disks", f"CRITICAL : {device}: {found} is not ext4 labelled {label}")


def boot(config: bytes, volume: Volume, *, disks: bool = True) -> list[str]:
    """A first boot of a fresh VM (a scratch root, removed after) with `config` and
    `volume` attached; what the disks stage did."""
    done: list[str] = []

    def before(stage: str) -> None:
        if stage == "mount" and disks:
            done.append(disks_stage_stand_in(volume.loop, VOLUME_LABEL))

    with scratch_root() as root:
        mount_point = root / K3S_SERVER_DIR.lstrip("/")
        try:
            apply_ignition(config, root, BOOT, before)
            assert not mount_point.is_mount()  # umount ran
        finally:
            # A failed stage leaves the volume mounted: never remove the root through it.
            if mount_point.is_mount():
                run("umount", str(mount_point))
        return done


def volume_files(volume: Volume, tmp_path: Path) -> dict[str, bytes]:
    """Every file on the volume, by path under K3S_SERVER_DIR, read through a mount."""
    point = tmp_path / "look"
    point.mkdir(exist_ok=True)
    run("mount", "-o", "ro", volume.loop, str(point))
    try:
        return {
            f"{K3S_SERVER_DIR}/{path.relative_to(point)}": path.read_bytes()
            for path in sorted(point.rglob("*"))
            if path.is_file() and "lost+found" not in path.parts
        }
    finally:
        run("umount", str(point))


def write_on_volume(volume: Volume, tmp_path: Path, files: dict[str, bytes]) -> None:
    """What k3s writes while the control plane runs (its datastore, its own keys)."""
    point = tmp_path / "k3s"
    point.mkdir(exist_ok=True)
    run("mount", volume.loop, str(point))
    try:
        for path, data in files.items():
            target = point / Path(path).relative_to(K3S_SERVER_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    finally:
        run("umount", str(point))


def config_for(cluster: Cluster, secrets: ClusterSecrets, volume: Volume) -> bytes:
    node = render_node(cluster, cluster.control_plane, secrets, charts=CHARTS, volume_id=volume.id)
    return node.ignition


def test_a_replacement_vm_keeps_the_state_and_the_cas(
    cluster: Cluster, secrets: ClusterSecrets, volume: Volume, tmp_path: Path
) -> None:
    config = config_for(cluster, secrets, volume)
    expected = ignition_files(config)

    assert boot(config, volume) == ["created"]
    label = run("blkid", "-o", "value", "-s", "LABEL", volume.loop).stdout.strip()
    assert label == VOLUME_LABEL
    first = volume_files(volume, tmp_path)
    for path in CA_FILES:
        assert first[path] == expected[path], path
    assert sorted(first) == sorted(p for p in expected if p.startswith(f"{K3S_SERVER_DIR}/"))

    k3s_wrote = {
        f"{K3S_SERVER_DIR}/db/state.db": os.urandom(256 * 1024),
        f"{K3S_SERVER_DIR}/tls/service.key": b"generated by k3s\n",
        f"{K3S_SERVER_DIR}/token": b"K10...::server:...\n",
    }
    write_on_volume(volume, tmp_path, k3s_wrote)

    # The replacement: a fresh root, the same volume.
    assert boot(config, volume) == ["reused"]
    second = volume_files(volume, tmp_path)
    assert second == {**first, **k3s_wrote}


def test_without_overwrite_a_replacement_vm_would_fail(
    cluster: Cluster, secrets: ClusterSecrets, volume: Volume
) -> None:
    """Why the files seeded onto the volume say `overwrite: true`: Ignition refuses to
    replace an existing file otherwise, and the replacement VM would not boot."""
    config = json.loads(config_for(cluster, secrets, volume))
    for entry in config["storage"]["files"]:
        if entry["path"].startswith(K3S_SERVER_DIR):
            assert entry["overwrite"] is True
            entry["overwrite"] = False
    strict = json.dumps(config).encode()
    boot(strict, volume)
    with pytest.raises(IgnitionFailed) as failed:
        boot(strict, volume)
    assert failed.value.stage == "files"


def test_a_foreign_filesystem_fails_loudly_and_is_not_touched(
    cluster: Cluster, secrets: ClusterSecrets, volume: Volume
) -> None:
    run("mkswap", volume.loop)
    before = volume.digest()
    config = config_for(cluster, secrets, volume)
    with pytest.raises(IgnitionFailed) as refused:
        boot(config, volume)
    assert refused.value.stage == "disks"
    # The real Ignition refuses it as well, without the stand-in: it cannot mount it.
    with pytest.raises(IgnitionFailed) as failed:
        boot(config, volume, disks=False)
    assert failed.value.stage == "mount"
    assert "CRITICAL" in failed.value.log
    assert volume.digest() == before


def test_a_foreign_label_is_refused_and_not_touched(
    cluster: Cluster, secrets: ClusterSecrets, volume: Volume
) -> None:
    """Another ext4 (another cluster's volume, a hand-made one): the label tells it apart.
    Only the disks stage checks labels: this is the stand-in's verdict (see above)."""
    run("mkfs.ext4", "-q", "-F", "-L", "someone-else", volume.loop)
    before = volume.digest()
    with pytest.raises(IgnitionFailed) as refused:
        boot(config_for(cluster, secrets, volume), volume)
    assert refused.value.stage == "disks"
    assert volume.digest() == before
