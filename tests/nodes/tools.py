"""Harnesses for the real tools the node configs are proven with, and small readers."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from raya.nodes.render import K3S_SELINUX_MODULE
from tests.support import require_tool

IGNITION = "/usr/lib/dracut/modules.d/30ignition/ignition"
HOST_UNITS = Path("/usr/lib/systemd/system")


def decode_data_url(url: str, compression: str | None) -> bytes:
    """The bytes of an RFC 2397 `data:` URL, gunzipped if Ignition is told it is gzip."""
    assert url.startswith("data:"), url
    header, _, payload = url[5:].partition(",")
    data = (
        base64.b64decode(payload)
        if header.endswith(";base64")
        else urllib.parse.unquote_to_bytes(payload)
    )
    return gzip.decompress(data) if compression == "gzip" else data


def ignition_files(ignition: bytes) -> dict[str, bytes]:
    """Every inline file of an Ignition config, decoded, by path."""
    config = json.loads(ignition)
    return {
        entry["path"]: decode_data_url(
            entry["contents"]["source"], entry["contents"].get("compression")
        )
        for entry in config["storage"]["files"]
        if entry.get("contents", {}).get("source", "").startswith("data:")
    }


@contextlib.contextmanager
def scratch_root() -> Iterator[Path]:
    """An empty FCOS-like root the real Ignition can apply a config to (see DESIGN.md).

    Outside pytest's private (0700) temporary tree: Ignition writes a user's SSH keys as
    that user, who must be able to reach them.
    """
    folder = Path(tempfile.mkdtemp(prefix="raya-ignition-"))
    try:
        folder.chmod(0o755)
        yield _ignition_root(folder)
    finally:
        shutil.rmtree(folder)


def _ignition_root(folder: Path) -> Path:
    root = folder / "root"
    for directory in ("etc", "usr", "var"):
        (root / directory).mkdir(parents=True)
    fcos_layout(root)
    for name, text in {
        "passwd": "root:x:0:0:root:/root:/bin/bash\n",
        "group": "root:x:0:\n",
        "shadow": "root:*:19000:0:99999:7:::\n",
        "gshadow": "root:*::\n",
        # Fedora's useradd makes a group per user, which Ignition's `group: core` needs.
        "login.defs": "USERGROUPS_ENAB yes\nUID_MIN 1000\nGID_MIN 1000\n",
    }.items():
        (root / "etc" / name).write_text(text)
    return root


# Debian's Ignition relabels what it wrote with setfiles, which needs a policy to read.
SELINUX_STUB = {
    "etc/selinux/config": "SELINUXTYPE=targeted\n",
    "etc/selinux/targeted/contexts/files/file_contexts": "/.*  system_u:object_r:etc_t:s0\n",
}


def fcos_layout(root: Path) -> None:
    """Make `root` look like FCOS where Ignition writes: /usr/local and /home are links into
    /var (replacing empty folders a distribution has there), plus the SELinux stub and k3s'
    policy module, as in the deployment a node boots into once it layered k3s-selinux."""
    for link, target in (("usr/local", "../var/usrlocal"), ("home", "var/home")):
        path = root / link
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        (root / link).parent.joinpath(target).mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    for name, text in SELINUX_STUB.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    module = root / K3S_SELINUX_MODULE.lstrip("/")
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_bytes(b"")


# What FCOS' initramfs runs, less what needs systemd on D-Bus (the `disks` stage waits for
# its devices through systemd, which this machine does not run).
STAGES = ("fetch-offline", "fetch", "files")


def apply_ignition(
    config: bytes,
    root: Path,
    stages: Sequence[str] = STAGES,
    before: Callable[[str], None] | None = None,
) -> str:
    """Run the real Ignition on `config` as FCOS' initramfs does, into `root`; its log.

    `stages` in order, `before(stage)` called ahead of each; `fetch` only if fetch-offline
    said the config needs the network (remote contents). Every stage must end "Ignition
    finished successfully".
    """
    ignition = require_tool("ignition", IGNITION)
    work = root.parent / "ignition-run"
    work.mkdir()
    (work / "config.ign").write_bytes(config)
    environment = {**os.environ, "IGNITION_CONFIG_FILE": str(work / "config.ign")}
    logs = []
    for stage in stages:
        if stage == "fetch" and not (work / "neednet").exists():
            continue
        if before is not None:
            before(stage)
        result = subprocess.run(
            [
                ignition,
                "-platform",
                "file",
                "-stage",
                stage,
                "-root",
                str(root),
                "-log-to-stdout",
                "-config-cache",
                str(work / "cache.json"),
                "-state-file",
                str(work / "state"),
                "-neednet",
                str(work / "neednet"),
            ],
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        log = result.stdout + result.stderr
        logs.append(log)
        if result.returncode != 0 or "Ignition finished successfully" not in log:
            raise IgnitionFailed(stage, log)
    return "\n".join(logs)


class IgnitionFailed(AssertionError):
    def __init__(self, stage: str, log: str) -> None:
        lines = [line for line in log.splitlines() if line.startswith(("CRITICAL", "ERROR"))]
        super().__init__(f"ignition stage {stage} failed:\n" + "\n".join(lines))
        self.stage = stage
        self.log = log


def ignition_validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("ignition-validate"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def prepare_for_systemd(root: Path, executables: list[str]) -> None:
    """What systemd-analyze needs besides our units: the distribution's units, and stand-ins
    for the executables the image provides (k3s is copied in by Packer, modprobe is FCOS')."""
    target = root / "usr/lib/systemd/system"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(HOST_UNITS, target, symlinks=True)
    for executable in executables:
        path = root / executable.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)


def systemd_verify(root: Path, units: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("systemd-analyze"), "verify", "--man=false", f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def nmcli_parse(keyfile: str) -> dict[str, dict[str, str]]:
    """What NetworkManager understood of a keyfile, as {section: {key: value}}."""
    result = subprocess.run(
        [
            require_tool("nmcli"),
            "--offline",
            "connection",
            "modify",
            "connection.autoconnect",
            "yes",
        ],
        input=keyfile,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in result.stdout.splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif "=" in line:
            key, _, value = line.partition("=")
            current[key] = value
    return sections


def probe_device(device: str) -> dict[str, str]:
    """What blkid's low-level probe finds on `device` itself (TYPE, LABEL...); {} if blank."""
    result = subprocess.run(
        [require_tool("blkid"), "-p", "-o", "export", device],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def device_files(device: str) -> dict[str, bytes]:
    """Every file of the filesystem on `device` by its path there, through a read-only
    mount (lost+found left out)."""
    point = Path(tempfile.mkdtemp(prefix="raya-device-"))
    subprocess.run(["mount", "-o", "ro", device, str(point)], check=True, timeout=60)
    try:
        return {
            str(path.relative_to(point)): path.read_bytes()
            for path in sorted(point.rglob("*"))
            if path.is_file() and "lost+found" not in path.parts
        }
    finally:
        subprocess.run(["umount", str(point)], check=True, timeout=60)
        point.rmdir()
