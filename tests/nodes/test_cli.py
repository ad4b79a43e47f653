"""`raya render` end to end, as a user runs it: files, table, and not a secret printed."""

from __future__ import annotations

import hashlib
import json
import os
import re
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
from tests.support import REPO

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
        [".raya-render", *(f"{node}{suffix}" for node in NODES for suffix in (".bu", ".ign"))]
    )
    for node in NODES:
        assert (out / f"{node}.ign").stat().st_mode & 0o777 == 0o600
        config = json.loads((out / f"{node}.ign").read_bytes())
        assert config["ignition"]["version"] == "3.3.0"
        assert (out / f"{node}.bu").read_text().startswith("variant: fcos\n")
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        *("node", "role", "pool", "type", "arch", "location", "private", "address", "DNS"),
        *("name", "labels", "taints", "Ignition", "/"),
        "32,768",  # Hetzner's user_data limit, 32 KiB
        "B",
    ]
    rows = [line.split() for line in lines[1:]]
    # The example's fleet: agents of the list form, cx23, cx23 and cx33, in nbg1.
    assert [row[:10] for row in rows] == [
        ["control-plane", "control-plane", "-", "cx33", "x86", "nbg1", "10.0.1.10",
         "cp.raya.example.com.", "-", "-"],
        ["agent-0", "agent", "-", "cx23", "x86", "nbg1", "10.0.1.20", "a0.raya.example.com.",
         "-", "-"],
        ["agent-1", "agent", "-", "cx23", "x86", "nbg1", "10.0.1.21", "a1.raya.example.com.",
         "-", "-"],
        ["agent-2", "agent", "-", "cx33", "x86", "nbg1", "10.0.1.22", "a2.raya.example.com.",
         "-", "-"],
    ]  # fmt: skip
    for row, node in zip(rows, NODES, strict=True):
        assert row[10] == f"{(out / f'{node}.ign').stat().st_size:,}"
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


def project_of(tmp_path: Path, fleet: dict[str, object], **settings: object) -> Path:
    """The example project as stack `prod`, with `fleet` and the `raya:` `settings`."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE_ROOT, project, dirs_exist_ok=True)
    (project / "Pulumi.yaml").write_text("name: raya\nruntime: python\n")
    stack = yaml.safe_load((project / "Pulumi.example.yaml").read_text())
    stack["config"].update({f"raya:{key}": value for key, value in settings.items()})
    (project / "Pulumi.prod.yaml").write_text(yaml.safe_dump(stack))
    (project / "deploy" / "fleet" / "agents.json").write_text(json.dumps(fleet))
    return project


POOLS = {
    "agents": ["cx23"],
    "pools": [
        {
            "name": "arm",
            "type": "cax21",
            "count": 2,
            "addresses": "10.0.1.64/28",
            "location": "fsn1",
            "labels": {"tier": "batch", "example.com/disk": "ssd"},
            "taints": ["dedicated=batch:NoSchedule"],
        }
    ],
}


def test_the_table_shows_what_a_pool_user_checks(tmp_path: Path) -> None:
    project = project_of(tmp_path, POOLS, authorizedUsers=["octo-alice"])
    result = raya("render", cwd=project)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [row[:10] for row in rows] == [
        ["control-plane", "control-plane", "-", "cx33", "x86", "nbg1", "10.0.1.10",
         "cp.raya.example.com.", "-", "-"],
        ["agent-0", "agent", "-", "cx23", "x86", "nbg1", "10.0.1.20", "a0.raya.example.com.",
         "-", "-"],
        ["arm-0", "agent", "arm", "cax21", "arm", "fsn1", "10.0.1.64", "arm-0.raya.example.com.",
         "example.com/disk=ssd,tier=batch", "dedicated=batch:NoSchedule"],
        ["arm-1", "agent", "arm", "cax21", "arm", "fsn1", "10.0.1.65", "arm-1.raya.example.com.",
         "example.com/disk=ssd,tier=batch", "dedicated=batch:NoSchedule"],
    ]  # fmt: skip
    # One user, one of everything: no "1 users".
    assert "for 1 user (octo-alice)\n" in result.stderr
    assert "wrote the .bu and .ign files of 4 nodes to out\n" in result.stderr


def test_the_public_mode_table_shows_no_private_address(tmp_path: Path) -> None:
    # raya:network: public attaches no private address; a fleet past one network's 100
    # servers renders (5 control planes, 100 agents in a pool).
    fleet: dict[str, object] = {"pools": [{"name": "web", "type": "cx23", "count": 100,
                        "addresses": "10.0.2.0/25"}]}  # fmt: skip
    project = project_of(
        tmp_path, fleet, network="public", controlPlanes=5, nodesSubnet="10.0.0.0/22",
        controlPlaneIp="10.0.0.10",
    )  # fmt: skip
    result = raya("render", cwd=project)
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()[1:]
    assert len(rows) == 105
    assert all("none (public mode)" in row for row in rows)
    assert not any("10.0." in row for row in rows)
    private = project_of(tmp_path, fleet, controlPlanes=5, nodesSubnet="10.0.0.0/22",
                         controlPlaneIp="10.0.0.10")  # fmt: skip
    refused = raya("render", cwd=private)
    assert refused.returncode == 1
    assert "105 nodes (control planes: 5, agents: 100)" in refused.stderr
    assert "raya:network: public" in refused.stderr


SNAPSHOT_SECRET = "/var/lib/raya/k3s-server-seed/manifests/raya-etcd-s3.yaml"


def snapshot_settings(folder: Path) -> dict[str, str]:
    files = ignition_files((folder / "control-plane.ign").read_bytes())
    settings: dict[str, str] = yaml.safe_load(files[SNAPSHOT_SECRET])["stringData"]
    return settings


def test_backups_render_as_configured(tmp_path: Path) -> None:
    s3 = {"endpoint": "fsn1.your-objectstorage.com", "bucket": "lab-backups", "region": "fsn1"}
    project = project_of(tmp_path, {"agents": ["cx23"]}, backupS3=s3, backupRetention=3)
    result = raya("render", cwd=project)
    assert result.returncode == 0, result.stderr
    settings = snapshot_settings(project / "out")
    assert {key: settings[f"etcd-s3-{key}"] for key in ("endpoint", "bucket", "folder")} == {
        "endpoint": "fsn1.your-objectstorage.com",
        "bucket": "lab-backups",
        "folder": "raya",  # the cluster's name, when backupS3 names no folder
    }
    assert (settings["etcd-s3-region"], settings["etcd-s3-retention"]) == ("fsn1", "3")
    assert (
        "etcd snapshots: on the schedule '0 */6 * * *', 3 scheduled snapshots kept, uploaded "
        "to bucket lab-backups, folder raya, at fsn1.your-objectstorage.com (region fsn1): "
        "raya:backupS3\n"
    ) in result.stderr


def test_without_backup_s3_the_snapshots_go_to_the_bucket_the_deployment_makes(
    tmp_path: Path,
) -> None:
    project = project_of(tmp_path, {"agents": ["cx23"]}, backupRetention=1)
    result = raya("render", cwd=project)
    assert result.returncode == 0, result.stderr
    settings = snapshot_settings(project / "out")
    # The program's name: `<clusterName>-etcd-` and the first 8 hex digits of the SHA-256 of
    # the zone's DNS name, "raya.example.com.".
    assert settings["etcd-s3-bucket"] == "raya-etcd-968af71a"
    assert settings["etcd-s3-endpoint"] == "storage.googleapis.com"
    assert settings["etcd-s3-region"] == "auto"
    assert "1 scheduled snapshot kept" in result.stderr


def test_nodes_no_longer_in_the_fleet_leave_no_files(tmp_path: Path) -> None:
    project = project_of(tmp_path, POOLS)
    assert raya("render", cwd=project).returncode == 0
    (project / "deploy" / "fleet" / "agents.json").write_text('{"agents": ["cx23"]}')
    result = raya("render", cwd=project)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (project / "out").iterdir()) == [
        ".raya-render", "agent-0.bu", "agent-0.ign", "control-plane.bu", "control-plane.ign",
    ]  # fmt: skip
    assert "wrote the .bu and .ign files of 2 nodes to out\n" in result.stderr
    assert sorted(p.name for p in project.iterdir() if p.name.startswith(".out")) == []


def test_a_failed_render_leaves_the_folder_as_it_was(tmp_path: Path) -> None:
    project = project_of(tmp_path, POOLS)
    assert raya("render", cwd=project).returncode == 0
    before = {p.name: p.read_bytes() for p in (project / "out").iterdir()}
    # A config over Hetzner's limit: many long handles, of digits that compress poorly.
    users = [hashlib.sha256(str(k).encode()).hexdigest()[:39] for k in range(400)]
    project_of(tmp_path, {"agents": ["cx23"]}, authorizedUsers=users)
    result = raya("render", cwd=project)
    assert result.returncode == 1
    assert "over Hetzner's user_data limit" in result.stderr
    assert {p.name: p.read_bytes() for p in (project / "out").iterdir()} == before
    assert [p.name for p in project.iterdir() if p.name.startswith(".out")] == []


def test_a_folder_holding_other_files_is_not_replaced(tmp_path: Path) -> None:
    project = project_of(tmp_path, {"agents": ["cx23"]})
    (project / "out").mkdir()
    (project / "out" / "notes.txt").write_text("mine\n")
    result = raya("render", cwd=project)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "error: out/notes.txt: not written by raya render (not listed in out/.raya-render), "
        "and the render replaces the whole folder; accepted: an --out folder holding only "
        "what raya render wrote there, or a new one: move the file away or choose another --out"
    )
    assert sorted(p.name for p in (project / "out").iterdir()) == ["notes.txt"]


def test_a_write_failing_half_way_leaves_the_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk full at the third file: the old folder whole, and no fresh one left."""
    from raya import files
    from raya.commands import render
    from raya.errors import RenderError

    out = tmp_path / "out"
    render._write(out, {"a.bu": b"old a", "b.bu": b"old b"})
    written: list[Path] = []
    real = files.write_atomically

    def failing(path: Path, data: bytes, mode: int) -> None:
        if len(written) == 2:
            raise OSError(28, "No space left on device", str(path))
        written.append(path)
        real(path, data, mode)

    monkeypatch.setattr(files, "write_atomically", failing)
    with pytest.raises(RenderError, match="No space left on device"):
        render._write(out, {"a.bu": b"new a", "b.bu": b"new b", "c.bu": b"new c"})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {
        ".raya-render": b"a.bu\nb.bu\n",
        "a.bu": b"old a",
        "b.bu": b"old b",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_readme_shows_what_render_example_prints(tmp_path: Path) -> None:
    """README's "What it prints" block, line for line: stderr's first line, the table, then
    stderr's others. Only the Ignition sizes may differ (throwaway secrets, a few bytes)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("(the first line and the last\nthree on stderr):\n\n```\n")[1]
    shown = block.split("```")[0]
    result = raya("render", "--example", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first, *rest = result.stderr.splitlines(keepends=True)
    printed = first + result.stdout + "".join(rest)
    size = re.compile(r"[0-9][0-9,]* B \([0-9]+%\)")
    assert size.sub("<size>", shown) == size.sub("<size>", printed)


def test_a_stack_built_from_a_kit_renders_the_kits_bucket(tmp_path: Path) -> None:
    """As the program adopts it (cloud/program/backups.py, `_bucket`): the kit's bucket, not
    the name the deployment would give a bucket of its own."""
    from raya.cloud import kit as recovery
    from tests.cloud.program.kits import example_kit

    project = project_of(tmp_path, {"agents": ["cx23"]}, fromRecoveryKit="kits/old.json")
    (project / "kits").mkdir()
    kit = example_kit()
    (project / "kits" / "old.json").write_bytes(recovery.encode(kit))
    result = raya("render", cwd=project)
    assert result.returncode == 0, result.stderr
    assert snapshot_settings(project / "out")["etcd-s3-bucket"] == "raya-etcd-example"
    assert result.stderr.splitlines()[-2].endswith(
        "bucket raya-etcd-example, folder raya, at storage.googleapis.com (region auto): "
        "the bucket of the recovery kit kits/old.json"
    )
    for secret in (kit.join_secret, kit.agent_secret, kit.backups.secret_key):
        assert secret not in result.stdout + result.stderr


def test_an_autoscaled_pool_renders_one_config_with_a_row(tmp_path: Path) -> None:
    fleet = {
        "agents": ["cx23"],
        "pools": [{"name": "burst", "type": "cpx31", "min": 0, "max": 8,
                   "addresses": "10.0.16.0/24", "taints": ["burst=yes:PreferNoSchedule"]}],
    }  # fmt: skip
    project = project_of(tmp_path, fleet)
    result = raya("render", cwd=project)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (project / "out").iterdir()) == [
        ".raya-render", "agent-0.bu", "agent-0.ign", "control-plane.bu", "control-plane.ign",
        "raya-burst.bu", "raya-burst.ign",
    ]  # fmt: skip
    size = (project / "out" / "raya-burst.ign").stat().st_size
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("raya-burst-*")]
    assert row.split() == [
        "raya-burst-*", "agent,", "autoscaled", "0-8", "burst", "cpx31", "x86", "nbg1",
        "10.0.16.0/24", "(Hetzner's", "pick)", "-", "-", "burst=yes:PreferNoSchedule",
        f"{size:,}", "B", f"({size / 32768:.0%})",
    ]  # fmt: skip
    assert "of 2 nodes and 1 autoscaled pool to out\n" in result.stderr
    # Nothing of the pool's config is printed: its agent token least of all.
    token = yaml.safe_load(
        ignition_files((project / "out" / "raya-burst.ign").read_bytes())[
            "/etc/rancher/k3s/config.yaml"
        ]
    )["token"]
    assert token not in result.stdout + result.stderr
