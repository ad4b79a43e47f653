"""A newcomer's first commands after the quick start (issue 36): in a fresh copy of the
repository's project, with no credentials (no HCLOUD_TOKEN, no GOOGLE_*), no Pulumi CLI on
PATH and no stack deployed, each command's first error line names the first thing missing
and the exact command that fixes it; it exits 1 (2 for a usage error) and writes nothing
in the project.

Nothing leaves the machine: HTTPS goes through a proxy on 127.0.0.1 where nothing listens,
so the Pulumi CLI's download (from get.pulumi.com) fails as on a machine without network."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from pulumi._version import version as sdk_version

from tests.support import REPO

INSTALL = "install it with `curl -fsSL https://get.pulumi.com | sh`"
CLI_MISSING = "error: the Pulumi CLI is missing"
CLUSTER_TOKEN = "`pulumi config set --secret raya:clusterHcloudToken <token>`"
HCLOUD_TOKEN = "HCLOUD_TOKEN is not set: `export HCLOUD_TOKEN=<token>`"
PREVIEW = "error: roll without NODES runs a preview to find the drifting ones: "

# Command line -> (exit status, the first error line's start, what it must also say).
WITHOUT_CLI: dict[str, tuple[int, str, str]] = {
    "preview": (1, CLI_MISSING, INSTALL),
    "up": (1, CLI_MISSING, INSTALL),
    "destroy": (1, CLI_MISSING, INSTALL),  # before asking for a confirmation
    "destroy --yes": (1, CLI_MISSING, INSTALL),
    "status": (1, CLI_MISSING, INSTALL),
    "roll --dry-run": (1, PREVIEW + "the Pulumi CLI is missing", INSTALL),
    "roll": (1, PREVIEW + "the Pulumi CLI is missing", INSTALL),
    "kubeconfig": (1, CLI_MISSING, INSTALL),
    "ssh control-plane": (1, CLI_MISSING, INSTALL),
    "backups": (1, CLI_MISSING, INSTALL),
    "backup": (1, CLI_MISSING, INSTALL),
    "restore some-snapshot --yes": (1, CLI_MISSING, INSTALL),
    "image build --dry-run": (1, f"error: {HCLOUD_TOKEN}", "Hetzner console"),
    "image build": (1, f"error: {HCLOUD_TOKEN}", "Hetzner console"),
    "ssh": (2, "Usage: raya ssh", ""),
    "restore": (2, "Usage: raya restore", ""),
}
# Once the CLI is there: what the stack file lacks, with the command that sets it.
WITH_CLI: dict[str, tuple[int, str, str]] = {
    "preview": (1, "error: ", CLUSTER_TOKEN),
    "up": (1, "error: ", CLUSTER_TOKEN),
    "roll --dry-run": (1, PREVIEW, CLUSTER_TOKEN),
}


def fresh_project(tmp_path: Path) -> Path:
    """The checkout's project as a clone has it: stack file, fleet, pins, Packer template."""
    project = tmp_path / "clone"
    project.mkdir()
    for name in ("Pulumi.yaml", "Pulumi.prod.yaml"):
        shutil.copy(REPO / name, project / name)
    for folder in ("deploy", "image"):
        shutil.copytree(REPO / folder, project / folder)
    return project


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def clean_environment(tmp_path: Path, bin_dir: Path) -> dict[str, str]:
    proxy = f"http://127.0.0.1:{closed_port()}"
    env = {
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "https_proxy": proxy,
        "HTTPS_PROXY": proxy,
        "COLUMNS": "300",
        "LANG": "C.UTF-8",
    }
    if "PYTHONPATH" in os.environ:  # the source under test, when it is not installed
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def first_errors(
    project: Path, env: dict[str, str], commands: dict[str, tuple[int, str, str]]
) -> None:
    before = tree(project)
    for line, (status, start, fix) in commands.items():
        run = subprocess.run(
            [sys.executable, "-m", "raya", *line.split(), "--root", str(project)]
            if status == 1
            else [sys.executable, "-m", "raya", *line.split()],
            cwd=project, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
            timeout=120,
        )  # fmt: skip
        first = run.stderr.splitlines()[0] if run.stderr else ""
        assert run.returncode == status, (line, run.stderr)
        assert first.startswith(start), (line, first)
        assert fix in first, (line, first)
        assert run.stdout == "", (line, run.stdout)
        assert tree(project) == before, f"raya {line} wrote in the project"


def test_without_the_cli_each_command_says_so_first(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = clean_environment(tmp_path, bin_dir)
    assert shutil.which("pulumi", path=env["PATH"]) is None
    project = fresh_project(tmp_path)
    expected = dict(WITHOUT_CLI)
    selinux = project / "image" / "k3s-selinux.pin"
    if json.loads(selinux.read_text())["sha256"] is None:
        # The repository's pin names its release without the RPM's sha256 (none could be
        # read where it was written): before any token, the pins must be completed, which
        # needs no account.
        for line in ("image build --dry-run", "image build"):
            expected[line] = (1, f"error: {selinux}: no sha256 pinned for k3s-selinux",
                              "`raya image pins --complete`")  # fmt: skip
    first_errors(project, env, expected)


def test_with_the_cli_the_stack_file_comes_next(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Only `pulumi version` is asked before the stack file is read.
    (bin_dir / "pulumi").write_text(f"#!/bin/sh\n[ \"$1\" = version ] && echo v{sdk_version}\n")
    (bin_dir / "pulumi").chmod(0o755)
    first_errors(fresh_project(tmp_path), clean_environment(tmp_path, bin_dir), WITH_CLI)

