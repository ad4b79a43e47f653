"""`raya render` end to end, as a user runs it: files, table, and not a secret printed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from raya.addons import GCP_SECRETS
from raya.github_keys import dump_keys_file
from raya.project import EXAMPLE_ROOT
from raya.render import IGNITION_LIMIT
from tests.nodes.fakes import many_users
from tests.nodes.tools import ignition_files
from tests.support import http_server, routes

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
        f"{IGNITION_LIMIT:,}",
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
    assert "SSH keys: 3 keys of 2 users inline" in result.stderr
    printed = result.stdout + result.stderr
    secrets = _secrets_in(out)
    assert len(secrets) == 7
    for secret in secrets:
        assert secret not in printed


def test_a_project_renders_with_its_keys_file(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE_ROOT, project)
    (project / "Pulumi.yaml").write_text("name: raya\nruntime: python\n")
    (project / "Pulumi.prod.yaml").write_text((project / "Pulumi.example.yaml").read_text())
    result = raya("render", "--keys-file", "keys.json", "--out", "rendered", cwd=project)
    assert result.returncode == 0, result.stderr
    assert len(list((project / "rendered").glob("*.ign"))) == 4


def test_keys_come_from_the_github_url_and_pin_it(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE_ROOT, project)
    users = many_users(12)
    (project / "Pulumi.yaml").write_text("name: raya\nruntime: python\n")
    stack = yaml.safe_load((project / "Pulumi.example.yaml").read_text())
    stack["config"]["raya:authorizedUsers"] = [user.handle for user in users]
    (project / "Pulumi.staging.yaml").write_text(yaml.safe_dump(stack))
    pages = {f"/{user.handle}.keys": user.raw.encode() for user in users}
    with http_server(routes(pages)) as url:
        result = raya("render", "-s", "staging", "--github-url", url, cwd=project)
    assert result.returncode == 0, result.stderr
    assert f"36 keys of 12 users, too many to carry inline: fetched at first boot from {url}/" in (
        result.stderr
    )
    files = json.loads((project / "out/agent-1.ign").read_bytes())["storage"]["files"]
    sources = sorted(f["contents"]["source"] for f in files if "authorized_keys.d" in f["path"])
    assert sources == sorted(f"{url}/{user.handle}.keys" for user in users)


def test_a_keys_file_missing_a_user_is_one_line_error(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE_ROOT, project)
    (project / "Pulumi.yaml").write_text("name: raya\nruntime: python\n")
    (project / "Pulumi.prod.yaml").write_text((project / "Pulumi.example.yaml").read_text())
    (project / "one.json").write_text(dump_keys_file(many_users(1)))
    result = raya("render", "--keys-file", "one.json", cwd=project)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "one.json: has no keys for octo-alice, octo-bob" in result.stderr
    assert not (project / "out").exists()


def test_example_takes_no_stack(tmp_path: Path) -> None:
    result = raya("render", "--example", "--stack", "prod", cwd=tmp_path)
    assert result.returncode == 2
