"""install.sh for real: a loop device stands for the server's disk, a synthetic FCOS-like disk
image (GPT, a partition named `root` holding ostree/deploy/fedora-coreos/var, xz-compressed)
a fake k3s binary and a fake k3s-selinux RPM are served from 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from raya.nodes.render import K3S_SELINUX_RPM
from tests.cloud.image.conftest import IMAGE_DIR, FakeWeb
from tests.support import require_root, require_tool

pytestmark = pytest.mark.tools

MiB = 1024 * 1024
SECTOR = 512
# A layout shaped like FCOS's: BIOS-BOOT, EFI-SYSTEM, boot, root (root neither first nor last).
LAYOUT = [("BIOS-BOOT", 2048, 2048), ("EFI-SYSTEM", 4096, 4096), ("boot", 8192, 8192)]
# FCOS' aarch64 image: no BIOS on ARM, its first partition is a `reserved` placeholder that
# keeps root the fourth partition (coreos-assembler's create_disk.sh).
AARCH64_LAYOUT = [("reserved", 2048, 2048), ("EFI-SYSTEM", 4096, 4096), ("boot", 8192, 8192)]
ROOT_START, ROOT_SIZE = 16384, 40960  # sectors: 8 MiB in, 20 MiB long
IMAGE_SIZE = 32 * MiB
K3S_PATH = "ostree/deploy/fedora-coreos/var/usrlocal/bin/k3s"
# Where the nodes' k3s unit layers it from at first boot (/usr/local is /var/usrlocal).
RPM_PATH = "ostree/deploy/fedora-coreos/var/usrlocal" + K3S_SELINUX_RPM.removeprefix("/usr/local")
RPM_NAME = "k3s-selinux-1.6-1.coreos.noarch.rpm"


def run(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def tools() -> None:
    for tool in ("losetup", "sfdisk", "mkfs.ext4", "xz", "curl", "wipefs", "blockdev", "mount"):
        require_tool(tool)
    require_root("install.sh tests (loop devices, mount)")


@dataclass
class Artifacts:
    image: Path  # the uncompressed disk image
    xz: Path
    k3s: Path
    rpm: Path


def fcos_like_image(
    folder: Path, tree: Path, layout: list[tuple[str, int, int]] = LAYOUT
) -> tuple[Path, Path]:
    """A GPT disk image shaped like FCOS's whose `root` partition holds `tree`, and its .xz."""
    folder.mkdir(parents=True, exist_ok=True)
    root_fs = folder / "root.ext4"
    with root_fs.open("wb") as handle:
        handle.truncate(ROOT_SIZE * SECTOR)
    run("mkfs.ext4", "-q", "-F", "-L", "root", "-d", str(tree), str(root_fs))
    image = folder / "fcos.raw"
    with image.open("wb") as handle:
        handle.truncate(IMAGE_SIZE)
    table = ["label: gpt"] + [
        f'start={start}, size={size}, name="{name}"' for name, start, size in layout
    ]
    table.append(f'start={ROOT_START}, size={ROOT_SIZE}, name="root"')
    run("sfdisk", "-q", str(image), input="\n".join(table) + "\n")
    with image.open("r+b") as handle:
        for name, start, size in layout:  # recognisable bytes in the other partitions
            handle.seek(start * SECTOR)
            handle.write((name.encode() * (size * SECTOR // len(name) + 1))[: size * SECTOR])
        handle.seek(ROOT_START * SECTOR)
        handle.write(root_fs.read_bytes())
    run("xz", "--keep", "--threads=0", "-1", str(image))
    return image, folder / "fcos.raw.xz"


def make_artifacts(
    folder: Path, layout: list[tuple[str, int, int]], elf_machine: bytes
) -> Artifacts:
    tree = folder / "tree"
    (tree / "ostree/deploy/fedora-coreos/var").mkdir(parents=True)
    (tree / "ostree/deploy/fedora-coreos/deploy").mkdir(parents=True)
    (tree / "ostree/deploy/fedora-coreos/deploy/marker").write_text("an FCOS deployment\n")
    image, xz = fcos_like_image(folder / "image", tree, layout)
    k3s = folder / "k3s"
    # An ELF header up to e_machine (x86-64 0x3e, AArch64 0xb7), then noise.
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00" + elf_machine
    k3s.write_bytes(header + os.urandom(64 * 1024))
    k3s.chmod(0o600)  # install.sh, not the download, decides the mode
    rpm = folder / RPM_NAME
    # An RPM lead (magic ed ab ee db, v3.0, binary, noarch), then noise.
    rpm.write_bytes(b"\xed\xab\xee\xdb\x03\x00\x00\x00" + os.urandom(16 * 1024))
    rpm.chmod(0o600)
    return Artifacts(image=image, xz=xz, k3s=k3s, rpm=rpm)


@pytest.fixture(scope="module")
def artifacts(tools: None, tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return make_artifacts(tmp_path_factory.mktemp("artifacts"), LAYOUT, b"\x3e\x00")


@pytest.fixture(scope="module")
def aarch64_artifacts(tools: None, tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return make_artifacts(tmp_path_factory.mktemp("aarch64"), AARCH64_LAYOUT, b"\xb7\x00")


@dataclass
class Disk:
    device: str
    backing: Path

    def digest(self) -> str:
        return sha256(self.backing)


def attach(backing: Path) -> str:
    return run("losetup", "--find", "--show", str(backing)).stdout.strip()


def detach_all(backing: Path) -> None:
    listing = run("losetup", "--noheadings", "--output", "NAME", "--associated", str(backing))
    for device in listing.stdout.split():
        subprocess.run(["losetup", "--detach", device], check=False)


@pytest.fixture
def disk(tools: None, tmp_path: Path) -> Iterator[Disk]:
    backing = tmp_path / "disk.img"
    pattern = hashlib.sha256(b"the previous system").digest() * (MiB // 32)
    with backing.open("wb") as handle:  # 48 MiB of something that is not the image
        for _ in range(48):
            handle.write(pattern)
    device = attach(backing)
    try:
        yield Disk(device, backing)
    finally:
        for loop in loops_over(device):  # install.sh's own, had it leaked one
            for point in mounts_of(loop):
                subprocess.run(["umount", point], check=False)
            subprocess.run(["losetup", "--detach", loop], check=False)
        detach_all(backing)


def loops_over(device: str) -> list[str]:
    listing = run("losetup", "--noheadings", "--output", "NAME", "--associated", device)
    return listing.stdout.split()


@pytest.fixture
def served(web: FakeWeb, artifacts: Artifacts) -> dict[str, str]:
    web.files["/fcos/fcos.raw.xz"] = artifacts.xz.read_bytes()
    web.files["/k3s/k3s"] = artifacts.k3s.read_bytes()
    web.files[f"/k3s-selinux/v1.6.stable.1/{RPM_NAME}"] = artifacts.rpm.read_bytes()
    return {
        "FCOS_IMAGE_URL": f"{web.url}/fcos/fcos.raw.xz",
        "FCOS_SHA256": sha256(artifacts.xz),
        "K3S_BINARY_URL": f"{web.url}/k3s/k3s",
        "K3S_SHA256": sha256(artifacts.k3s),
        "K3S_SELINUX_RPM_URL": f"{web.url}/k3s-selinux/v1.6.stable.1/{RPM_NAME}",
        "K3S_SELINUX_SHA256": sha256(artifacts.rpm),
    }


def install(
    env: dict[str, str], disk: str | None, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env}
    if tmpdir is not None:  # where install.sh's mktemp puts its downloads and mount point
        environment["TMPDIR"] = str(tmpdir)
    if disk is not None:
        environment["DISK"] = disk
    return subprocess.run(
        ["bash", str(IMAGE_DIR / "install.sh")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def mounted_root(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    mounts: list[tuple[Path, str]] = []

    def mount(backing: Path) -> Path:
        point = tmp_path / f"mnt{len(mounts)}"
        point.mkdir()
        loop = run(
            "losetup", "--find", "--show", "--read-only",
            "--offset", str(ROOT_START * SECTOR), "--sizelimit", str(ROOT_SIZE * SECTOR),
            str(backing),
        ).stdout.strip()  # fmt: skip
        run("mount", "-o", "ro", loop, str(point))
        mounts.append((point, loop))
        return point

    yield mount
    for point, loop in reversed(mounts):
        subprocess.run(["umount", str(point)], check=False)
        subprocess.run(["losetup", "--detach", loop], check=False)


def mounts_of(source: str) -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[0] == source]  # fmt: skip


def mounts_under(prefix: str) -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(prefix)]  # fmt: skip


@pytest.mark.parametrize("architecture", ["x86_64", "aarch64"])
def test_k3s_lands_in_the_deployed_system(
    disk: Disk,
    web: FakeWeb,
    request: pytest.FixtureRequest,
    mounted_root: Callable[[Path], Path],
    tmp_path: Path,
    architecture: str,
) -> None:
    """For each FCOS architecture's layout, served under the names the template downloads
    (`fedora-coreos-<v>-hetzner.<arch>.raw.xz`, `k3s` / `k3s-arm64`)."""
    fixture = "artifacts" if architecture == "x86_64" else "aarch64_artifacts"
    artifacts: Artifacts = request.getfixturevalue(fixture)
    binary = "k3s" if architecture == "x86_64" else "k3s-arm64"
    image_name = f"fedora-coreos-44.20260720.3.1-hetzner.{architecture}.raw.xz"
    web.files[f"/fcos/{architecture}/{image_name}"] = artifacts.xz.read_bytes()
    web.files[f"/k3s/{binary}"] = artifacts.k3s.read_bytes()
    web.files[f"/k3s-selinux/{RPM_NAME}"] = artifacts.rpm.read_bytes()
    served = {
        "FCOS_IMAGE_URL": f"{web.url}/fcos/{architecture}/{image_name}",
        "FCOS_SHA256": sha256(artifacts.xz),
        "K3S_BINARY_URL": f"{web.url}/k3s/{binary}",
        "K3S_SHA256": sha256(artifacts.k3s),
        "K3S_SELINUX_RPM_URL": f"{web.url}/k3s-selinux/{RPM_NAME}",
        "K3S_SELINUX_SHA256": sha256(artifacts.rpm),
    }
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = install(served, disk.device, scratch)
    assert result.returncode == 0, result.stderr
    # Unmounted, detached and cleaned up.
    assert mounts_under(str(scratch)) == []
    assert loops_over(disk.device) == []
    assert list(scratch.iterdir()) == []

    # The image went onto the disk: every byte before the root partition is the image's.
    image = artifacts.image.read_bytes()
    with disk.backing.open("rb") as handle:
        assert handle.read(ROOT_START * SECTOR) == image[: ROOT_START * SECTOR]

    root = mounted_root(disk.backing)
    k3s = root / K3S_PATH
    info = k3s.stat()
    assert stat.S_IMODE(info.st_mode) == 0o755
    assert (info.st_uid, info.st_gid) == (0, 0)
    assert sha256(k3s) == served["K3S_SHA256"]
    for folder in (k3s.parent, k3s.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755 and folder.stat().st_uid == 0
    # The k3s-selinux RPM, readable by rpm-ostree at first boot; nothing else of /var made,
    # so FCOS' first boot still creates and labels /var/lib and the rest.
    rpm = root / RPM_PATH
    assert sha256(rpm) == served["K3S_SELINUX_SHA256"]
    assert stat.S_IMODE(rpm.stat().st_mode) == 0o644 and rpm.stat().st_uid == 0
    assert sorted(path.name for path in (root / "ostree/deploy/fedora-coreos/var").iterdir()) == [
        "usrlocal"
    ]
    assert sorted(path.name for path in (root / K3S_PATH).parents[1].iterdir()) == [
        "bin",
        "share",
    ]
    assert (
        root / "ostree/deploy/fedora-coreos/deploy/marker"
    ).read_text() == "an FCOS deployment\n"


@pytest.mark.parametrize("which", ["FCOS_SHA256", "K3S_SHA256", "K3S_SELINUX_SHA256"])
def test_a_wrong_sha256_leaves_the_disk_untouched(
    disk: Disk, served: dict[str, str], which: str
) -> None:
    before = disk.digest()
    wrong = dict(served, **{which: "0" * 64})
    result = install(wrong, disk.device)
    assert result.returncode != 0
    assert f"pinned {'0' * 64}" in result.stderr
    assert f"{disk.device} left untouched" in result.stderr
    assert disk.digest() == before


@pytest.mark.parametrize(
    "missing",
    [
        "FCOS_IMAGE_URL",
        "FCOS_SHA256",
        "K3S_BINARY_URL",
        "K3S_SHA256",
        "K3S_SELINUX_RPM_URL",
        "K3S_SELINUX_SHA256",
    ],
)
def test_a_missing_input_fails_with_its_name(
    disk: Disk, served: dict[str, str], missing: str
) -> None:
    before = disk.digest()
    env = {name: value for name, value in served.items() if name != missing}
    result = install(env, disk.device)
    assert result.returncode != 0
    assert f"install.sh: {missing} is not set" in result.stderr
    assert disk.digest() == before


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("K3S_SHA256", "ABC"),
        # What the template hands on for a k3s-selinux pin whose sha256 is not recorded yet.
        ("K3S_SELINUX_SHA256", "unrecorded"),
    ],
)
def test_a_malformed_sha256_is_refused(
    disk: Disk, served: dict[str, str], name: str, value: str
) -> None:
    before = disk.digest()
    result = install(dict(served, **{name: value}), disk.device)
    assert result.returncode != 0
    assert f"{name} is '{value}'; expected 64 lowercase hex digits" in result.stderr
    assert disk.digest() == before


def test_disk_must_be_a_block_device(tools: None, served: dict[str, str], tmp_path: Path) -> None:
    regular = tmp_path / "not-a-disk"
    regular.write_bytes(b"x" * 4096)
    for target in (str(regular), str(tmp_path / "absent")):
        result = install(served, target)
        assert result.returncode != 0
        assert f"install.sh: DISK {target} is not a block device" in result.stderr
    assert regular.read_bytes() == b"x" * 4096


# A private /dev for install.sh: a tmpfs holding the few nodes it needs, loop nodes for every
# index losetup may pick, and `sda` made as the node of the test's loop device. The host's own
# /dev/sda (GitHub's runners have one) is neither visible nor touched.
PRIVATE_DEV = """
set -eu
mount --make-rprivate /
mkdir -p "$KEEP"
mount --bind /dev "$KEEP"
mount -t tmpfs -o mode=0755 tmpfs /dev
for name in null zero full random urandom loop-control; do
  touch "/dev/$name"
  mount --bind "$KEEP/$name" "/dev/$name"
done
for index in $(seq 0 255); do mknod "/dev/loop$index" b 7 "$index"; done
mknod /dev/sda b "$SDA_MAJOR" "$SDA_MINOR"
exec bash "$INSTALL"
"""


def test_disk_defaults_to_sda(
    disk: Disk, served: dict[str, str], artifacts: Artifacts, tmp_path: Path
) -> None:
    unshare = require_tool("unshare")
    device = os.stat(disk.device).st_rdev
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    environment = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR": str(scratch), **served,
        "KEEP": str(tmp_path / "host-dev"), "INSTALL": str(IMAGE_DIR / "install.sh"),
        "SDA_MAJOR": str(os.major(device)), "SDA_MINOR": str(os.minor(device)),
    }  # no DISK
    result = subprocess.run([unshare, "--mount", "bash", "-c", PRIVATE_DEV], env=environment,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert (
        "installed k3s and the k3s-selinux RPM in /usr/local of the FCOS image on /dev/sda"
        in result.stdout
    )
    # What install.sh took for /dev/sda is the test's disk: the image is on it now.
    image = artifacts.image.read_bytes()
    with disk.backing.open("rb") as handle:
        assert handle.read(ROOT_START * SECTOR) == image[: ROOT_START * SECTOR]


def test_an_image_too_big_for_the_disk_is_refused(
    tools: None, served: dict[str, str], tmp_path: Path
) -> None:
    backing = tmp_path / "small.img"
    backing.write_bytes(b"\x01" * (16 * MiB))
    device = attach(backing)
    try:
        result = install(served, device)
    finally:
        detach_all(backing)
    assert result.returncode != 0
    assert "does not fit on" in result.stderr
    assert backing.read_bytes() == b"\x01" * (16 * MiB)


def test_a_failed_download_is_reported(disk: Disk, served: dict[str, str], web: FakeWeb) -> None:
    before = disk.digest()
    result = install(dict(served, K3S_BINARY_URL=f"{web.url}/k3s/absent"), disk.device)
    assert result.returncode != 0
    assert f"could not download {web.url}/k3s/absent" in result.stderr
    assert disk.digest() == before


def test_an_image_without_a_root_partition_is_reported(
    disk: Disk, served: dict[str, str], web: FakeWeb, tmp_path: Path
) -> None:
    image = tmp_path / "rootless.raw"
    with image.open("wb") as handle:
        handle.truncate(8 * MiB)
    run("sfdisk", "-q", str(image), input='label: gpt\nstart=2048, size=4096, name="boot"\n')
    run("xz", "-1", str(image))
    xz = tmp_path / "rootless.raw.xz"
    web.files["/fcos/rootless.raw.xz"] = xz.read_bytes()
    env = dict(served, FCOS_IMAGE_URL=f"{web.url}/fcos/rootless.raw.xz", FCOS_SHA256=sha256(xz))
    result = install(env, disk.device)
    assert result.returncode != 0
    assert "no single partition named 'root'" in result.stderr
    assert loops_over(disk.device) == []


@pytest.mark.parametrize(
    ("target", "what", "pin"),
    [
        ("usrlocal/bin/k3s", "k3s", "K3S_SHA256"),
        ("raya/k3s-selinux.rpm", "k3s-selinux RPM", "K3S_SELINUX_SHA256"),
    ],
)
def test_the_installed_copies_are_checked_again(
    disk: Disk, served: dict[str, str], tmp_path: Path, target: str, what: str, pin: str
) -> None:
    """A copy that differs from the verified download (here an `install` that appends a byte
    to what it installs there) fails the second sha256 check, and nothing stays mounted."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "install").write_text(
        '#!/bin/sh\n/usr/bin/install "$@" || exit\n'
        'for last; do :; done\n'
        f'case "$last" in */{target}) printf x >> "$last" ;; esac\n'
    )
    (stubs / "install").chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(served, PATH=f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin")
    result = install(env, disk.device, scratch)
    assert result.returncode != 0
    assert f"install.sh: the installed {what}: sha256 is " in result.stderr
    assert f"pinned {served[pin]}; {disk.device} is not usable" in result.stderr
    assert mounts_under(str(scratch)) == [] and loops_over(disk.device) == []


def test_shellcheck_is_clean() -> None:
    shellcheck = require_tool("shellcheck")
    scripts = [str(IMAGE_DIR / "install.sh"), str(IMAGE_DIR / "build.sh")]
    result = subprocess.run([shellcheck, *scripts], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_a_root_without_fcos_var_is_reported_and_unmounted(
    disk: Disk, served: dict[str, str], web: FakeWeb, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    _, xz = fcos_like_image(tmp_path / "image", tree)
    web.files["/fcos/other.raw.xz"] = xz.read_bytes()
    env = dict(served, FCOS_IMAGE_URL=f"{web.url}/fcos/other.raw.xz", FCOS_SHA256=sha256(xz))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = install(env, disk.device, scratch)
    assert result.returncode != 0
    assert "has no ostree/deploy/fedora-coreos/var" in result.stderr
    # The trap unmounted and detached the partition it had mounted.
    assert mounts_under(str(scratch)) == []
    assert loops_over(disk.device) == []
    assert list(scratch.iterdir()) == []
