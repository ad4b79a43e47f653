"""`raya image build` end to end: a fake Hetzner API and metadata server on 127.0.0.1, and a
stand-in `packer` on PATH that records how it is called."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raya.cloud.image import MIN_PACKER, find_packer
from raya.errors import ImageError
from raya.model.pins import FcosPin, K3sPin, Pins, label_selector, snapshot_labels
from tests.cloud import hetzner_api
from tests.cloud.image import hcl
from tests.cloud.image.conftest import (
    FCOS,
    IMAGE_DIR,
    K3S,
    K3S_SELINUX,
    PINS,
    FakeWeb,
    Snapshot,
    make_project,
)
from tests.support import require_tool

CLUSTER = "raya-test"
LABELS = snapshot_labels(PINS, CLUSTER)

STANDIN = """\
#!{python}
import json, os, sys
with open(os.environ["PACKER_STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{
        "argv": sys.argv[1:],
        "token": os.environ.get("HCLOUD_TOKEN"),
        "endpoint": os.environ.get("HCLOUD_ENDPOINT"),
        "cwd": os.getcwd(),
    }}) + "\\n")
if sys.argv[1:] == ["version"]:
    print(os.environ.get("PACKER_STANDIN_VERSION", "Packer v1.11.2"))
    sys.exit(0)
print("standin packer", sys.argv[1], "running", flush=True)
sys.exit(int(os.environ.get("PACKER_STANDIN_FAIL_" + sys.argv[1].upper(), "0")))
"""


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    calls: list[dict[str, Any]]

    @property
    def commands(self) -> list[str]:
        return [call["argv"][0] for call in self.calls]


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    packer = folder / "packer"
    packer.write_text(STANDIN.format(python=sys.executable))
    packer.chmod(0o755)
    return folder


def raya(
    project: Path, web: FakeWeb, path: Path, *args: str, drop: tuple[str, ...] = (), **env: str
) -> Run:
    log = project.parent / "packer.log"
    log.unlink(missing_ok=True)
    environment = {
        "PATH": str(path),
        "HOME": str(project.parent),
        "COLUMNS": "200",
        "HCLOUD_TOKEN": "test-token",
        "HCLOUD_ENDPOINT": web.hcloud,
        "RAYA_FCOS_BUILDS_URL": web.fcos,
        "RAYA_K3S_RELEASES_URL": web.k3s_releases,
        "RAYA_K3S_SELINUX_RELEASES_URL": web.k3s_selinux_releases,
        "RAYA_K3S_SELINUX_API_URL": web.k3s_selinux_api,
        "PACKER_STANDIN_LOG": str(log),
        # The raya under test, where a worktree puts its own sources first.
        **{name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ},
        **env,
    }
    for name in drop:
        del environment[name]
    result = subprocess.run(
        [sys.executable, "-m", "raya", "image", "build", "--stack", "test", *args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Run(result.returncode, result.stdout, result.stderr, calls)


def asked_selectors(web: FakeWeb) -> list[str]:
    return [query["label_selector"][0] for path, query, _ in web.requests if path == "/v1/images"]


def test_an_existing_snapshot_means_no_build(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    web.snapshots = [Snapshot(4711, dict(LABELS))]
    run = raya(project, web, bin_dir)
    assert run.code == 0, run.stderr
    assert "x86 snapshot 4711 (raya-fcos-4711, available" in run.stdout
    assert "nothing to build" in run.stdout
    assert run.calls == []  # packer is not even asked its version
    assert [path for path in web.paths() if path != "/v1/images"] == []  # nor upstream checked


def test_the_selector_asked_for_is_what_the_template_stamps(
    project: Path, web: FakeWeb, bin_dir: Path
) -> None:
    web.snapshots = [Snapshot(4711, dict(LABELS))]
    assert raya(project, web, bin_dir).code == 0
    ((_, query, headers),) = web.requests
    template = hcl.load(project / "image" / "fcos.pkr.hcl")
    stamped = hcl.Evaluator(template, project / "image", {"cluster_name": CLUSTER}).value(
        hcl.source_of(template, "hcloud", "fcos")["snapshot_labels"]
    )
    assert query["label_selector"] == [label_selector(stamped)]
    assert query["type"] == ["snapshot"]
    assert query["architecture"] == ["x86"]
    assert headers["Authorization"] == "Bearer test-token"


def test_a_missing_snapshot_is_built_once(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    web.publish(PINS)
    older = dict(LABELS, k3s_version="v1.35.1-k3s1")
    web.snapshots = [Snapshot(1, older), Snapshot(2, dict(LABELS, managed_by="other"))]
    run = raya(project, web, bin_dir)
    assert run.code == 0, run.stderr
    assert run.commands == ["version", "init", "build"]
    template = str(project / "image" / "fcos.pkr.hcl")
    assert run.calls[1]["argv"] == ["init", template]
    assert run.calls[2]["argv"] == [
        "build",
        "-var", "architecture=x86",
        "-var", f"cluster_name={CLUSTER}",
        "-var", f"fcos_builds_url={web.fcos}",
        "-var", f"k3s_releases_url={web.k3s_releases}",
        "-var", f"k3s_selinux_releases_url={web.k3s_selinux_releases}",
        "-var", "location=hel1",
        # The stand-in sells cx23 and cpx11 (40 GB) in hel1, cx23 cheaper.
        "-var", "server_type=cx23",
        template,
    ]  # fmt: skip
    for call in run.calls[1:]:
        assert call["token"] == "test-token"
        assert call["endpoint"] == web.hcloud
        assert call["cwd"] == str(project)
    # Packer's output reaches the user as it comes, between raya's own lines.
    assert "standin packer init running" in run.stdout
    assert run.stdout.index("init running") < run.stdout.index("build running")
    assert "built the x86 snapshot" in run.stdout
    assert asked_selectors(web) == [label_selector(LABELS)]
    assert "token" not in run.stdout + run.stderr


@pytest.mark.parametrize("which", ["fcos", "k3s", "k3s-selinux"])
def test_an_upstream_mismatch_stops_before_packer(
    project: Path, web: FakeWeb, bin_dir: Path, which: str
) -> None:
    upstream = "9" * 64
    web.publish_k3s_selinux(K3S_SELINUX)
    if which == "fcos":
        web.publish_fcos(FCOS, meta_sha256=upstream)
        web.publish_k3s(K3S)
        pinned, pin_file = FCOS.sha256, "fcos.pin"
    elif which == "k3s":
        web.publish_fcos(FCOS)
        web.publish_k3s(K3S, listed_sha256=upstream)
        pinned, pin_file = K3S.sha256, "k3s.pin"
    else:
        web.publish_fcos(FCOS)
        web.publish_k3s(K3S)
        web.publish_k3s_selinux(dataclasses.replace(K3S_SELINUX, sha256=upstream))
        pinned, pin_file = K3S_SELINUX.sha256 or "", "k3s-selinux.pin"
    run = raya(project, web, bin_dir)
    assert run.code == 1
    assert pin_file in run.stderr and pinned in run.stderr and upstream in run.stderr
    assert "Traceback" not in run.stderr
    assert "init" not in run.commands and "build" not in run.commands


def test_dry_run_checks_everything_and_runs_nothing(
    project: Path, web: FakeWeb, bin_dir: Path
) -> None:
    web.publish(PINS)
    run = raya(project, web, bin_dir, "--dry-run")
    assert run.code == 0, run.stderr
    assert run.commands == ["version"]
    assert "would run" in run.stdout
    assert f"{bin_dir / 'packer'} init {project / 'image' / 'fcos.pkr.hcl'}" in run.stdout
    assert f"-var cluster_name={CLUSTER}" in run.stdout
    assert any(path.endswith("/meta.json") for path in web.paths())


def test_a_failed_build_is_an_error(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    web.publish(PINS)
    run = raya(project, web, bin_dir, PACKER_STANDIN_FAIL_BUILD="3")
    assert run.code == 1
    assert "`packer build` failed with exit status 3" in run.stderr
    assert "built the snapshot" not in run.stdout


def test_a_failed_init_stops_before_build(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    web.publish(PINS)
    run = raya(project, web, bin_dir, PACKER_STANDIN_FAIL_INIT="1")
    assert run.code == 1
    assert "`packer init` failed" in run.stderr
    assert run.commands == ["version", "init"]


def test_no_token_no_request(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    run = raya(project, web, bin_dir, drop=("HCLOUD_TOKEN",))
    assert run.code == 1
    assert "HCLOUD_TOKEN is not set" in run.stderr
    assert web.requests == [] and run.calls == []


def test_a_rejected_token_is_an_error(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    run = raya(project, web, bin_dir, HCLOUD_TOKEN="wrong-token")
    assert run.code == 1
    assert "unable to authenticate" in run.stderr
    assert "wrong-token" not in run.stdout + run.stderr
    assert run.calls == []


def test_no_packer_says_how_to_install_it(project: Path, web: FakeWeb, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    run = raya(project, web, empty)
    assert run.code == 1
    assert "packer is not on PATH" in run.stderr
    assert "apt.releases.hashicorp.com" in run.stderr
    assert "releases.hashicorp.com/packer" in run.stderr


def test_a_too_old_packer_is_refused(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    run = raya(project, web, bin_dir, PACKER_STANDIN_VERSION="Packer v1.6.6")
    assert run.code == 1
    assert "is Packer 1.6.6, too old" in run.stderr
    assert run.commands == ["version"]


def test_find_packer_judges_the_real_packer(monkeypatch: pytest.MonkeyPatch) -> None:
    packer = require_tool("packer")
    monkeypatch.setenv("PATH", str(Path(packer).parent))
    answer = subprocess.run([packer, "version"], capture_output=True, text=True, check=True)
    major, minor = (int(part) for part in answer.stdout.split()[1].lstrip("v").split(".")[:2])
    if (major, minor) < MIN_PACKER:  # Debian's package (1.6.6)
        with pytest.raises(ImageError, match=r"too old: install Packer >= 1\.7"):
            find_packer()
    else:
        assert find_packer() == packer


def test_build_sh_wraps_raya(project: Path, web: FakeWeb, bin_dir: Path) -> None:
    (project / "image" / "build.sh").write_bytes((IMAGE_DIR / "build.sh").read_bytes())
    (project / "image" / "build.sh").chmod(0o755)
    shim = bin_dir / "raya"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m raya "$@"\n')
    shim.chmod(0o755)
    web.snapshots = [Snapshot(7, dict(LABELS))]
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HCLOUD_TOKEN": "test-token",
        "HCLOUD_ENDPOINT": web.hcloud,
    }
    result = subprocess.run(
        [str(project / "image" / "build.sh"), "--stack", "test"],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "snapshot 7" in result.stdout and "nothing to build" in result.stdout


def test_another_stack_selects_its_own_cluster(web: FakeWeb, bin_dir: Path, tmp_path: Path) -> None:
    other = make_project(tmp_path / "other", cluster="blue")
    web.snapshots = [Snapshot(5, dict(LABELS))]
    web.publish(PINS)
    run = raya(other, web, bin_dir, "--dry-run")
    assert run.code == 0, run.stderr
    assert asked_selectors(web) == [label_selector(snapshot_labels(PINS, "blue"))]
    assert "would run" in run.stdout


def test_a_missing_template_is_reported_before_asking_hetzner(
    project: Path, web: FakeWeb, bin_dir: Path
) -> None:
    (project / "image" / "fcos.pkr.hcl").unlink()
    run = raya(project, web, bin_dir)
    assert run.code == 1
    assert "fcos.pkr.hcl: the Packer template is missing" in run.stderr
    assert web.requests == [] and run.calls == []


ARM_FLEET = {
    "agents": ["cx23"],
    "pools": [{"name": "arm", "type": "cax21", "count": 2, "addresses": "10.0.1.128/27"}],
}


def built_architectures(run: Run) -> list[str]:
    return [
        arg.removeprefix("architecture=")
        for call in run.calls
        if call["argv"][0] == "build"
        for arg in call["argv"]
        if arg.startswith("architecture=")
    ]


def test_each_architecture_the_fleet_uses_is_built_unless_it_exists(
    web: FakeWeb, bin_dir: Path, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project", fleet=ARM_FLEET)
    web.publish(PINS)
    web.snapshots = [Snapshot(7, dict(LABELS), architecture="x86")]
    run = raya(project, web, bin_dir)
    assert run.code == 0, run.stderr
    assert "x86 snapshot 7 (" in run.stdout
    assert "no arm snapshot has the labels" in run.stdout
    assert run.commands == ["version", "init", "build"]
    assert built_architectures(run) == ["arm"]
    # The arm pins were checked against their own upstream files, the x86 ones not needed.
    assert f"/k3s/releases/download/{K3S.version}/sha256sum-arm64.txt" in web.paths()
    assert f"/fcos/prod/streams/stable/builds/{FCOS.version}/aarch64/meta.json" in web.paths()
    assert not any(path.endswith("sha256sum-amd64.txt") for path in web.paths())
    queried = [query["architecture"] for path, query, _ in web.requests if path == "/v1/images"]
    assert queried == [["arm"], ["x86"]]

    web.snapshots = []
    run = raya(project, web, bin_dir)
    assert run.code == 0, run.stderr
    assert built_architectures(run) == ["arm", "x86"]

    web.snapshots = [Snapshot(7, dict(LABELS)), Snapshot(8, dict(LABELS), architecture="arm")]
    run = raya(project, web, bin_dir)
    assert (run.code, run.calls) == (0, [])
    assert "nothing to build" in run.stdout


def test_an_arm_fleet_without_arm_pins_stops_before_anything_then_complete_fixes_it(
    web: FakeWeb, bin_dir: Path, tmp_path: Path
) -> None:
    """Pin files written before ARM support have no aarch64 field: still valid, but an ARM
    snapshot cannot be built from them. The build refuses before it asks Hetzner or Packer
    anything, naming `raya image pins --complete`; that adds the aarch64 sha256s of the
    pinned releases, so the labels stay and the x86 snapshot the nodes run stays theirs."""
    x86_only = Pins(
        fcos=FcosPin(FCOS.stream, FCOS.version, FCOS.sha256),
        k3s=K3sPin(K3S.version, K3S.sha256),
        k3s_selinux=K3S_SELINUX,
    )
    project = make_project(tmp_path / "project", pins=x86_only, fleet=ARM_FLEET)
    web.publish(PINS)
    web.snapshots = [Snapshot(7, dict(LABELS))]
    run = raya(project, web, bin_dir, drop=("HCLOUD_TOKEN",))  # its fix needs no token
    assert run.code == 1
    fcos_pin, k3s_pin = project / "image" / "fcos.pin", project / "image" / "k3s.pin"
    assert (
        f"error: {fcos_pin}: no aarch64_sha256 pinned for FCOS 44.20260720.3.1 aarch64; "
        "`raya image pins --complete` adds it for the pinned release without moving it; "
        f"{k3s_pin}: no aarch64_sha256 pinned for k3s v1.36.5+k3s1 arm64; "
        "`raya image pins --complete` adds it for the pinned release without moving it; "
        "nothing was built"
    ) in run.stderr.replace("\n", "")
    assert "Traceback" not in run.stderr
    assert web.requests == [] and run.calls == []

    completed = subprocess.run(
        [sys.executable, "-m", "raya", "image", "pins", "--complete", "--root", str(project)],
        env={
            "PATH": "/usr/bin:/bin",
            "RAYA_FCOS_BUILDS_URL": web.fcos,
            "RAYA_K3S_RELEASES_URL": web.k3s_releases,
            **{name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ},
        },
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    run = raya(project, web, bin_dir)
    assert run.code == 0, run.stderr
    assert "x86 snapshot 7 (" in run.stdout  # the same labels: the x86 nodes keep theirs
    assert built_architectures(run) == ["arm"]


# ---- the build server: a type Hetzner sells, available and not deprecated, where nodes run ----


def build_server(run: Run) -> dict[str, str]:
    """The `location` and `server_type` variables of each `packer build`, by architecture."""
    found = {}
    for call in run.calls:
        if call["argv"][0] == "build":
            given = dict(arg.split("=", 1) for arg in call["argv"] if "=" in arg)
            found[given["architecture"]] = f"{given['server_type']} in {given['location']}"
    return found


@pytest.mark.parametrize(
    ("location", "expected"),
    # The stand-in sells cx23 (the cheapest with 40 GB) in the EU only, cpx11 everywhere.
    [("nbg1", "cx23 in nbg1"), ("ash", "cpx11 in ash"), ("hil", "cpx11 in hil"),
     ("sin", "cpx11 in sin")],
)  # fmt: skip
def test_the_x86_image_builds_in_every_location_on_a_type_sold_there(
    web: FakeWeb, bin_dir: Path, tmp_path: Path, location: str, expected: str
) -> None:
    project = make_project(tmp_path / "project", location=location, fleet={"agents": ["cpx21"]})
    web.publish(PINS)
    run = raya(project, web, bin_dir)
    assert run.code == 0, run.stderr
    assert build_server(run) == {"x86": expected}
    assert f"x86 build server: {expected}" in run.stdout


def test_a_type_out_of_stock_or_deprecated_there_is_not_built_on(
    web: FakeWeb, bin_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project", fleet={"agents": ["cx23"]})
    web.publish(PINS)
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "hel1"), {"available": False})
    run = raya(project, web, bin_dir)
    assert build_server(run) == {"x86": "cpx11 in hel1"}
    # Deprecated there, even with a date to come: a throwaway server takes no type leaving.
    later = {
        "announced": "2026-01-01T00:00:00+00:00",
        "unavailable_after": "2099-01-01T00:00:00+00:00",
    }
    monkeypatch.setitem(hetzner_api.STATES, ("cpx11", "hel1"), {"deprecation": later})
    run = raya(project, web, bin_dir)
    # The next smallest disk (80 GB): cx33 before the dearer cpx21.
    assert build_server(run) == {"x86": "cx33 in hel1"}
    # In stock and deprecated elsewhere only: hel1's own state is what counts.
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "hel1"), {})
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "fsn1"), {"available": False})
    assert build_server(raya(project, web, bin_dir)) == {"x86": "cx23 in hel1"}


def test_an_arm_pool_builds_where_it_runs(web: FakeWeb, bin_dir: Path, tmp_path: Path) -> None:
    fleet = {
        "agents": ["cx23"],
        "pools": [{"name": "arm", "type": "cax21", "count": 1, "addresses": "10.0.1.128/27",
                   "location": "fsn1"}],
    }  # fmt: skip
    project = make_project(tmp_path / "project", fleet=fleet)
    web.publish(PINS)
    run = raya(project, web, bin_dir)
    assert run.code == 0, run.stderr
    assert build_server(run) == {"arm": "cax11 in fsn1", "x86": "cx23 in hel1"}


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_location_selling_no_type_of_the_architecture_is_refused_before_packer(
    web: FakeWeb, bin_dir: Path, tmp_path: Path, dry_run: list[str]
) -> None:
    fleet = {"agents": [], "pools": [{"name": "arm", "type": "cax11", "count": 1,
                                      "addresses": "10.0.1.128/27"}]}  # fmt: skip
    project = make_project(tmp_path / "project", location="sin", fleet=fleet)
    web.publish(PINS)
    run = raya(project, web, bin_dir, *dry_run)
    assert run.code == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "error: sin (where the fleet's arm nodes run): Hetzner sells no arm server type there "
        "that is available and not deprecated, to build the arm snapshot on; it sells such "
        "types in fsn1, hel1, nbg1; nothing was built"
    )
    assert run.calls == []  # Packer not even asked its version
    assert not any("meta.json" in path for path in web.paths())


def test_no_type_of_the_architecture_left_in_stock_there_is_refused(
    web: FakeWeb, bin_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project", location="ash", fleet={"agents": ["cpx21"]})
    web.publish(PINS)
    gone = {"deprecation": {"announced": "2025-01-01T00:00:00+00:00",
                            "unavailable_after": "2025-06-01T00:00:00+00:00"}}  # fmt: skip
    for name in ("cpx11", "cpx21", "cpx31"):
        monkeypatch.setitem(hetzner_api.STATES, (name, "ash"), {"available": False})
    monkeypatch.setitem(hetzner_api.STATES, ("cpx41", "ash"), gone)
    run = raya(project, web, bin_dir)
    assert run.code == 1
    assert "ash (where the fleet's x86 nodes run): Hetzner sells no x86 server type" in run.stderr
    assert "it sells such types in fsn1, hel1, hil, nbg1, sin; nothing was built" in run.stderr
    assert run.calls == []
