"""`raya render` end to end, as a user runs it: files, table, and not a secret printed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raya.model.project import EXAMPLE_ROOT
from raya.nodes.addons import GCP_SECRETS
from raya.nodes.render import SSH_HANDLES_FILE
from tests.nodes.tools import ignition_files

NODES = ["control-plane", "agent-0", "agent-1", "agent-2"]


def raya(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}
    return subprocess.run(
        [sys.executable, "-m", "raya", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


SECRET_MANIFESTS = {file for file, _ in GCP_SECRETS.values()}


def _secrets_in(folder: Path) -> list[str]:
    """Every secret the rendered files carry: join secret, token, CA keys, SA keys, passwords."""
    control_plane = ignition_files((folder / "control-plane.ign").read_bytes())
    found = [yaml.safe_load(control_plane["/etc/rancher/k3s/config.yaml"])["token"]]
    found += [
        data.decode()
        for path, data in control_plane.items()
        if path.endswith(".key") or path.rsplit("/", 1)[-1] in SECRET_MANIFESTS
    ]
    found.append(control_plane["/etc/rancher/node/password"].decode().strip())
    agent = ignition_files((folder / "agent-0.ign").read_bytes())
    found.append(yaml.safe_load(agent["/etc/rancher/k3s/config.yaml"])["token"])
    found.append(agent["/etc/rancher/node/password"].decode().strip())
    return found


def test_example_renders_offline_and_prints_no_secret(tmp_path: Path) -> None:
    result = raya("render", "--example", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{node}{suffix}" for node in NODES for suffix in (".bu", ".ign")
    )
    for node in NODES:
        assert (out / f"{node}.ign").stat().st_mode & 0o777 == 0o600
        config = json.loads((out / f"{node}.ign").read_bytes())
        assert config["ignition"]["version"] == "3.3.0"
        assert (out / f"{node}.bu").read_text().startswith("variant: fcos\n")
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "node",
        "role",
        "private",
        "address",
        "DNS",
        "name",
        "Ignition",
        "/",
        "32,768",  # Hetzner's user_data limit, 32 KiB
        "B",
    ]
    rows = [line.split() for line in lines[1:]]
    assert [row[:4] for row in rows] == [
        ["control-plane", "control-plane", "10.0.1.10", "cp.raya.example.com."],
        ["agent-0", "agent", "10.0.1.20", "a0.raya.example.com."],
        ["agent-1", "agent", "10.0.1.21", "a1.raya.example.com."],
        ["agent-2", "agent", "10.0.1.22", "a2.raya.example.com."],
    ]
    for row, node in zip(rows, NODES, strict=True):
        assert row[4] == f"{(out / f'{node}.ign').stat().st_size:,}"
    assert "THROWAWAY" in result.stderr
    assert "SSH keys: fetched by every node at boot and every 15 minutes from GitHub, for 2 " in (
        result.stderr
    )
    printed = result.stdout + result.stderr
    secrets = _secrets_in(out)
    assert len(secrets) == 8
    for secret in secrets:
        assert secret not in printed


def test_a_project_renders_without_the_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The users' keys are no input of a config: rendering a project fetches nothing."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE_ROOT, project)
    (project / "Pulumi.yaml").write_text("name: raya\nruntime: python\n")
    stack = yaml.safe_load((project / "Pulumi.example.yaml").read_text())
    stack["config"]["raya:authorizedUsers"] = ["octo-carol"]
    (project / "Pulumi.prod.yaml").write_text(yaml.safe_dump(stack))
    for name in ("https_proxy", "HTTPS_PROXY"):  # were anything fetched, it would fail
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    result = raya("render", "--out", "rendered", cwd=project)
    assert result.returncode == 0, result.stderr
    agent = ignition_files((project / "rendered" / "agent-1.ign").read_bytes())
    assert agent[SSH_HANDLES_FILE] == b"octo-carol\n"


def test_example_takes_no_stack(tmp_path: Path) -> None:
    result = raya("render", "--example", "--stack", "prod", cwd=tmp_path)
    assert result.returncode == 2
