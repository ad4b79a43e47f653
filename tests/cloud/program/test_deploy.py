"""`raya preview | up | destroy` wiring, without the Pulumi CLI: raya drives the real Automation
API SDK (so its calls bind to the SDK's real signatures) against a stand-in `pulumi` that logs
each command line and answers for raya's own program from the engine model's plan
(standin_pulumi.py: the program run under the engine model of engine.py, its steps written as
the CLI's engine events and display). What the engine does with each resource in detail is
test_replacement.py's; here, what raya asks of the CLI and how it reads the answers."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from raya.cloud import deploy
from raya.cloud import kit as recovery
from raya.errors import ConfigError, DeployError
from raya.model.config import load_stack_config
from raya.model.fleet import Pool
from tests.cloud import hetzner_api
from tests.cloud.program import standin_pulumi
from tests.cloud.program.engine import Cloud, deployed_cloud
from tests.cloud.program.hetzner import Server
from tests.cloud.program.mocks import Snapshot
from tests.cloud.program.test_autoscaler import FLEET as AUTOSCALED_FLEET
from tests.cloud.program.test_autoscaler import deployed_config, deployed_env
from tests.cloud.program.test_program import LABELS, provider_mocks
from tests.operate import autoscaler_double
from tests.runner import invoke
from tests.support import REPO

# The example project's resources (tests/cloud/program/test_program.py,
# test_the_whole_graph_for_the_example_fleet): what a first `up` creates.
EXAMPLE_RESOURCES = 45
SERVER = "hcloud:index/server:Server"


@dataclass
class Standin:
    """The stand-in `pulumi` on PATH: the real SDK drives it, it answers for raya's program."""

    log: Path

    def runs(self) -> list[Any]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def calls(self) -> list[list[str]]:
        """Every command line raya, through the SDK, ran; `version` and its own notes left
        out."""
        notes = ("env", "printed", "imported")
        return [run for run in self.runs() if run != ["version"] and run[0] not in notes]

    def environments(self) -> list[dict[str, str | None]]:
        """The program's environment at each stack operation, as the CLI received it."""
        return [run[1] for run in self.runs() if run[0] == "env"]

    def printed(self) -> list[list[str]]:
        """The display the CLI printed at each stack operation."""
        return [run[1] for run in self.runs() if run[0] == "printed"]

    def operations(self) -> list[list[str]]:
        return [run for run in self.calls() if run[0] in ("preview", "up", "destroy")]

    def backend(self, stack: str = "prod") -> standin_pulumi.Backend:
        return standin_pulumi.load(stack)


@pytest.fixture
def standin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: list[str]
) -> Standin:
    folder = tmp_path / "standin"
    folder.mkdir()
    script = folder / "pulumi"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={REPO / 'src'}:{REPO} exec {sys.executable} "
                      '-m tests.cloud.program.standin_pulumi "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "pulumi.log"))
    monkeypatch.setenv("STANDIN_STATE", str(tmp_path / "backend"))
    monkeypatch.setenv("STANDIN_STACKS", "prod staging failing")
    # The deployer's: the stand-in's state is sealed with it, as a passphrase stack's is.
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "correct horse battery staple")
    (tmp_path / "pulumi.log").touch()
    return Standin(tmp_path / "pulumi.log")


def secret_values(backend: standin_pulumi.Backend) -> list[str]:
    """The state's secrets: the join secrets, the CA and service account keys."""
    found = []
    for resource in backend.snapshot.values():
        for key in ("result", "privateKeyPem", "privateKey", "secret"):
            if isinstance(resource.outputs.get(key), str):
                found.append(resource.outputs[key])
    return found


def test_up_streams_the_clis_display_and_masks_secret_outputs(
    project: Path, standin: Standin
) -> None:
    lines: list[str] = []
    result = deploy.run("up", project, "prod", lines.append)
    # raya hands on, line by line, exactly what the CLI printed.
    (printed,) = standin.printed()
    assert lines == [line.rstrip() for line in printed]
    # The CLI's display of raya's own resources: its servers, created.
    assert " +  hcloud:index:Server agent-2 created" in lines
    assert " +  gcp:dns:ManagedZone primary creating" in lines
    ((up,),) = [standin.operations()]
    assert up[:3] == ["up", "--yes", "--skip-preview"]
    assert up[up.index("--color") + 1] == "never" and up[up.index("--stack") + 1] == "prod"
    # The changes are the engine's summary of raya's program, read by the real SDK.
    assert result.changes == {"create": EXAMPLE_RESOURCES}
    assert len(standin.backend().snapshot) == EXAMPLE_RESOURCES
    # The SDK learns which outputs are secret from `stack output --json` ("[secret]").
    assert result.outputs["kubeconfig"] == result.outputs["backups"] == "[secret]"
    assert result.outputs["zone"] == '"raya.example.com."'
    shown = json.dumps(result.outputs) + "\n".join(lines)
    assert [s for s in secret_values(standin.backend()) if s in shown] == []
    # ...and the SDK hands raya the secret kit decrypted, for its file alone.
    assert result.outputs["recoveryKit"] == "[secret]"
    assert result.recovery_kit is not None
    assert result.recovery_kit["format"] == "raya-recovery-kit"


def test_preview_counts_changes_from_the_engine_events(project: Path, standin: Standin) -> None:
    result = deploy.run("preview", project, "prod", lambda line: None)
    # Read by the SDK from the `--event-log` (its summary event), not from any text.
    assert result.changes == {"create": EXAMPLE_RESOURCES} and result.outputs == {}
    ((preview,),) = [standin.operations()]
    assert preview[0] == "preview" and "--event-log" in preview
    assert standin.backend().snapshot == {}  # a preview changes no state
    deploy.run("up", project, "prod", lambda line: None)
    again = deploy.run("preview", project, "prod", lambda line: None)
    assert again.changes == {"same": EXAMPLE_RESOURCES}


def test_destroy_never_creates_a_stack_nor_needs_valid_files(
    project: Path, standin: Standin
) -> None:
    deploy.run("up", project, "prod", lambda line: None)
    servers = standin.backend().hetzner["servers"]
    assert len(servers) == 4
    (project / "deploy" / "fleet" / "agents.json").write_text("{}")
    result = deploy.run("destroy", project, "prod", lambda line: None)
    # Everything, the protected control plane and volume included (raya lifted it first).
    assert result.changes == {"delete": EXAMPLE_RESOURCES}
    assert standin.backend().snapshot == {} and standin.backend().hetzner["servers"] == {}
    assert not any(run[:2] == ["stack", "init"] or "--create" in run for run in standin.calls())
    assert [run[0] for run in standin.operations()] == ["up", "destroy"]


def test_bad_stack_file_fails_before_pulumi_starts(project: Path, standin: Standin) -> None:
    stack_file = project / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text().replace("nbg1", "mars1"))
    with pytest.raises(ConfigError, match="raya:location is 'mars1'"):
        deploy.run("up", project, "prod", lambda line: None)
    with pytest.raises(ConfigError, match=r"Pulumi\.staging\.yaml: stack file not found"):
        deploy.run("up", project, "staging", lambda line: None)
    assert standin.calls() == []


@pytest.mark.parametrize("action", ["preview", "up"])
def test_a_missing_cluster_token_fails_before_pulumi_starts(
    project: Path, standin: Standin, action: deploy.Action
) -> None:
    stack_file = project / "Pulumi.prod.yaml"
    text = stack_file.read_text()
    stack_file.write_text(text[: text.index("  raya:clusterHcloudToken:")])
    with pytest.raises(ConfigError) as caught:
        deploy.run(action, project, "prod", lambda line: None)
    assert str(caught.value).startswith(
        f"{stack_file}: raya:clusterHcloudToken is not set; accepted: a Hetzner Cloud API "
        "token (read and write) of the cluster's own, set with `pulumi config set --secret "
        "raya:clusterHcloudToken <token>`"
    )
    assert standin.calls() == []
    # A destroy needs no token: it runs no program.
    deploy.run("destroy", project, "prod", lambda line: None)


def test_bad_chart_pins_fail_before_pulumi_starts(project: Path, standin: Standin) -> None:
    (project / "image" / "charts.pin").write_text("{}")
    with pytest.raises(ConfigError, match=r"charts\.pin: expected a JSON object with exactly"):
        deploy.run("preview", project, "prod", lambda line: None)
    assert standin.calls() == []


def test_engine_failure_is_one_deploy_error(project: Path, standin: Standin) -> None:
    shutil.copy(project / "Pulumi.prod.yaml", project / "Pulumi.failing.yaml")
    # A server made by hand in the Hetzner project holds agent-1's name: Hetzner refuses the
    # create (uniqueness_error), the engine stops the update, the CLI exits 255.
    backend = standin_pulumi.Backend()
    hetzner = standin_pulumi.hetzner_of(backend)
    hetzner.create_server("raya-agent-1", ())
    standin_pulumi.keep_hetzner(backend, hetzner)
    standin_pulumi.save("failing", backend)
    with pytest.raises(DeployError) as failed:
        deploy.run("up", project, "failing", lambda line: None)
    assert str(failed.value) == (
        "pulumi up of stack failing failed: error: agent-1: server name raya-agent-1 is "
        "already used (uniqueness_error)"
    )
    # The steps done stay done: each server the engine created before it stopped is in the
    # state, and in Hetzner beside the one made by hand. Which ones got that far depends on
    # the order the engine ran them in (servers do not wait for each other), as with Pulumi.
    after = standin.backend("failing")
    created = {s.name for s in after.hetzner["servers"].values()}
    recorded = {r.inputs["name"] for r in after.snapshot.values() if r.typ == SERVER}
    assert "raya-agent-1" in created and "raya-agent-1" not in recorded
    assert created - {"raya-agent-1"} == recorded, (created, recorded)
    # What every server waits for was done first, and stays: the network and its subnets.
    kept = {r.name for r in after.snapshot.values() if r.typ.startswith("hcloud:index/network")}
    assert {"network", "nodes", "load-balancers"} <= kept, kept


def fake_pulumi(folder: Path, version: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "pulumi"
    script.write_text(f'#!/bin/sh\n[ "$1" = version ] && echo {version}\n')
    script.chmod(0o755)


def test_cli_on_path_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pulumi(tmp_path / "bin", "v3.200.0")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(auto.PulumiCommand, "install", pytest.fail)
    command = deploy.pulumi_command()
    assert str(command.version) == "3.200.0"


def test_cli_too_old_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pulumi(tmp_path / "bin", "v2.9.0")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK", raising=False)
    with pytest.raises(DeployError, match=r"get\.pulumi\.com \| sh"):
        deploy.pulumi_command()


def test_missing_cli_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    installed = tmp_path / "versions" / "3.200.0"

    def install() -> auto.PulumiCommand:
        fake_pulumi(installed / "bin", "v3.200.0")
        return auto.PulumiCommand(root=str(installed))

    monkeypatch.setattr(auto.PulumiCommand, "install", install)
    assert deploy.pulumi_command().command == str(installed / "bin" / "pulumi")


def test_missing_cli_that_cannot_be_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    def install() -> auto.PulumiCommand:
        raise urllib.error.URLError("no route to get.pulumi.com")

    monkeypatch.setattr(auto.PulumiCommand, "install", install)
    with pytest.raises(DeployError) as error:
        deploy.pulumi_command()
    message = str(error.value)
    assert "no route to get.pulumi.com" in message
    assert "curl -fsSL https://get.pulumi.com | sh" in message


def test_raya_up_prints_progress_summary_and_no_secret(project: Path, standin: Standin) -> None:
    result = invoke(["up", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert " +  hcloud:index:Server control-plane created" in result.output  # the CLI's line
    assert f"up of stack prod: create {EXAMPLE_RESOURCES}" in result.output
    assert "kubeconfig: [secret]" in result.output
    assert [s for s in secret_values(standin.backend()) if s in result.output] == []
    # The kit, from the stack's secret output through the real SDK: in its file, 0600, whole,
    # with a warning; none of its secrets printed (they are the state's, checked above).
    path = project / ".raya" / "prod.recovery-kit.json"
    assert path.stat().st_mode & 0o777 == 0o600
    kit = recovery.load(path, load_stack_config(project / "Pulumi.prod.yaml"))
    assert kit.join_secret in secret_values(standin.backend())
    assert f"wrote the recovery kit {path} (mode 0600)" in result.output
    assert "the same as cluster-admin" in result.output


def test_raya_preview_takes_the_stack(project: Path, standin: Standin) -> None:
    shutil.copy(project / "Pulumi.prod.yaml", project / "Pulumi.staging.yaml")
    result = invoke(["preview", "--stack", "staging", "--root", str(project)])
    assert result.exit_code == 0, result.output
    ((preview,),) = [standin.operations()]
    assert preview[preview.index("--stack") + 1] == "staging"
    assert f"preview of stack staging: create {EXAMPLE_RESOURCES}" in result.output


def test_raya_destroy_asks_first(project: Path, standin: Standin) -> None:
    deploy.run("up", project, "prod", lambda line: None)
    protected = sorted(r.name for r in standin.backend().snapshot.values() if r.protect)
    assert protected == ["backups", "control-plane", "control-plane-state"]
    mark = len(standin.calls())
    refused = invoke(["destroy", "--root", str(project)], input="n\n")
    # It looked the stack up before asking, and did nothing more.
    assert refused.exit_code == 1
    assert standin.calls()[mark:] == [["stack", "select", "--stack", "prod"]]
    agreed = invoke(["destroy", "--root", str(project)], input="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert standin.backend().snapshot == {}
    yes = invoke(["destroy", "--yes", "--root", str(project)])
    assert yes.exit_code == 0
    assert [run[0] for run in standin.operations()] == ["up", "destroy", "destroy"]
    # The first destroy lifted the protection first (the confirmation is it): without it,
    # the engine refuses to delete the control plane. The second found nothing to lift.
    (imported,) = [run[1] for run in standin.runs() if run[0] == "imported"]
    assert [r["urn"].rsplit("::", 1)[1] for r in imported["deployment"]["resources"]
            if r.get("protect")] == []  # fmt: skip


def test_raya_destroy_of_no_stack_says_so_before_asking(project: Path, standin: Standin) -> None:
    shutil.copy(project / "Pulumi.prod.yaml", project / "Pulumi.never.yaml")
    result = invoke(["destroy", "--stack", "never", "--root", str(project)], input="y\n")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: stack never does not exist in the Pulumi backend: nothing deployed yet (`raya "
        "up --stack never` deploys it), or another backend than the one it is in (`pulumi "
        "whoami --verbose` names this one)\n"
    )
    assert [run[0] for run in standin.operations()] == []


def test_open_stack_drives_the_cli_in_the_project(project: Path, standin: Standin) -> None:
    stack = deploy.open_stack(project, "prod", True)
    assert stack.name == "prod"
    assert stack.workspace.work_dir == str(project)
    assert ["stack", "select", "--stack", "prod"] in [run[:4] for run in standin.calls()]
    with pytest.raises(DeployError, match="stack other does not exist in the Pulumi backend"):
        deploy.open_stack(project, "other", False)


def test_without_pulumi_packages_raya_works_and_deploying_says_what_to_install(
    project: Path,
) -> None:
    """The base install has no Pulumi packages: the CLI still starts, `raya up` explains."""
    blocked = (
        "import sys; sys.modules['pulumi'] = None; sys.argv = ['raya', *sys.argv[1:]]; "
        "from raya.cli import main; main()"
    )

    def raya(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", blocked, *args], capture_output=True, text=True, cwd=project
        )

    assert raya("--help").returncode == 0
    result = raya("up")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: raya up needs the Pulumi packages (pulumi is missing): install raya's [deploy] "
        "extra, e.g. `scripts/bootstrap deploy`"
    ]


def test_replace_reaches_the_cli_as_targets_and_the_program_as_its_environment(
    project: Path, standin: Standin
) -> None:
    deploy.run("up", project, "prod", lambda line: None)
    before = {s.name: i for i, s in standin.backend().hetzner["servers"].items()}
    deploy.run("up", project, "prod", lambda line: None, replace=("control-plane", "agent-1"))
    (_, up) = standin.operations()
    targets = [up[i + 1] for i, arg in enumerate(up) if arg == "--replace"]
    assert targets == [
        "urn:pulumi:prod::raya::hcloud:index/server:Server::control-plane",
        "urn:pulumi:prod::raya::hcloud:index/server:Server::agent-1",
    ]
    assert standin.environments() == [
        {"RAYA_REPLACE": None}, {"RAYA_REPLACE": "control-plane,agent-1"}
    ]
    # The control plane was unprotected in the state (export, import) before the update.
    kinds = [run[:2] for run in standin.calls()]
    assert kinds.index(["stack", "import"]) < len(kinds) - 1 - kinds[::-1].index(["up", "--yes"])
    (state,) = [run[1] for run in standin.runs() if run[0] == "imported"]  # a JSON state
    protect = {r["urn"].rsplit("::", 1)[1]: r["protect"]
               for r in state["deployment"]["resources"] if r["type"] == SERVER}  # fmt: skip
    assert protect == {"control-plane": False, "agent-0": False, "agent-1": False,
                       "agent-2": False}  # fmt: skip
    # The engine replaced those two servers, and no other.
    after = {s.name: i for i, s in standin.backend().hetzner["servers"].items()}
    changed = sorted(name for name in after if after[name] != before[name])
    assert changed == ["raya-agent-1", "raya-control-plane"]


POOL_ONLY = {"pools": [{"name": "web", "type": "cx23", "count": 1, "addresses": "10.0.1.64/27"}]}


def test_preview_names_the_nodes_an_update_would_drain_and_delete(
    project: Path, standin: Standin
) -> None:
    deploy.run("up", project, "prod", lambda line: None)
    # The fleet now has a pool only: the list's three agents leave.
    (project / "deploy" / "fleet" / "agents.json").write_text(json.dumps(POOL_ONLY))
    result = invoke(["preview", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert (
        "nodes leaving (3 agent(s), 0 control plane(s)): cordon and drain agent-0, agent-1, "
        "agent-2; delete their servers, then their node objects"
    ) in result.output
    # The engine's plan of that preview: their servers deleted, the pool's created.
    printed = [line.rstrip() for line in standin.printed()[1]]
    assert " -  hcloud:index:Server agent-2 deleted" in printed
    assert " +  hcloud:index:Server web-0 created" in printed


def test_an_update_that_would_delete_nodes_without_draining_them_is_refused(
    project: Path, standin: Standin
) -> None:
    deploy.run("up", project, "prod", lambda line: None)
    # What `raya roll` asks (`replace=`, no removal): it must never delete a node bare.
    (project / "deploy" / "fleet" / "agents.json").write_text(json.dumps(POOL_ONLY))
    with pytest.raises(DeployError, match="would delete agent-0, agent-1, agent-2, which the"):
        deploy.run("up", project, "prod", lambda line: None, replace=("control-plane",))
    assert [run[0] for run in standin.operations()] == ["up"]
    assert len(standin.backend().hetzner["servers"]) == 4


def arm_cluster(project: Path, location: str, pool_location: str | None) -> None:
    """The cluster at `location` (control planes cpx31, sold everywhere), one ARM pool."""
    stack = project / "Pulumi.prod.yaml"
    document = yaml.safe_load(stack.read_text())
    document["config"].update(
        {"raya:location": location, "raya:controlPlaneServerType": "cpx31"}
    )
    stack.write_text(yaml.safe_dump(document))
    pool = {"name": "arm", "type": "cax21", "count": 2, "addresses": "10.0.1.64/27"}
    if pool_location:
        pool["location"] = pool_location
    fleet = {"agents": ["cpx21"], "pools": [pool]}
    (project / "deploy" / "fleet" / "agents.json").write_text(json.dumps(fleet))


def test_an_arm_pool_where_hetzner_does_not_sell_its_type_is_refused_before_pulumi(
    project: Path, standin: Standin, hetzner_api: Any
) -> None:
    # Hetzner sells cax21 in fsn1, nbg1 and hel1 (tests/cloud/hetzner_api.py), not in ash.
    arm_cluster(project, "ash", None)
    result = invoke(["preview", "--root", str(project)])
    assert result.exit_code == 1
    fleet = project / "deploy" / "fleet" / "agents.json"
    assert (
        f"{fleet}: pools[0] (arm): field 'type' is 'cax21', which Hetzner does not sell in "
        "ash (raya:location); it sells cax21 in fsn1, hel1, nbg1; accepted: a type sold in "
        "ash, or one of those locations"
    ) == str(result.exception)
    assert standin.operations() == []
    assert set(hetzner_api.asked) == {"cax21", "cpx21", "cpx31"}
    # In the EU zone, the same pool in fsn1 is sold: the preview runs.
    arm_cluster(project, "nbg1", "fsn1")
    assert invoke(["preview", "--root", str(project)]).exit_code == 0
    assert [run[0] for run in standin.operations()] == ["preview"]


def test_a_control_plane_type_not_sold_in_the_location_names_the_stack_setting(
    project: Path, standin: Standin
) -> None:
    arm_cluster(project, "ash", None)
    stack = project / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text().replace("cpx31", "cx33"))
    with pytest.raises(DeployError) as refused:
        deploy.run("up", project, "prod", lambda line: None)
    assert str(refused.value).startswith(
        f"{stack}: raya:controlPlaneServerType is 'cx33', which Hetzner does not sell in ash"
    )
    assert standin.operations() == []


def test_a_preview_leaves_out_leaving_control_planes_the_engine_would_refuse_to_delete(
    project: Path, standin: Standin
) -> None:
    stack = project / "Pulumi.prod.yaml"
    three = stack.read_text() + "  raya:controlPlanes: 3\n"
    stack.write_text(three)
    deploy.run("up", project, "prod", lambda line: None)
    state = standin.backend().snapshot
    assert state[f"urn:pulumi:prod::raya::{SERVER}::control-plane-2"].protect
    stack.write_text(three.replace("raya:controlPlanes: 3", "raya:controlPlanes: 1"))
    result = deploy.run("preview", project, "prod", lambda line: None)
    assert result.leaving == ("control-plane-1", "control-plane-2")
    # Excluded with what hangs on them: the engine, which refuses to delete a protected
    # resource even in a preview, is never asked to.
    (_, preview) = standin.operations()
    assert sorted(preview[i + 1] for i, arg in enumerate(preview) if arg == "--exclude") == [
        f"urn:pulumi:prod::raya::{SERVER}::control-plane-1",
        f"urn:pulumi:prod::raya::{SERVER}::control-plane-2",
        "urn:pulumi:prod::raya::hcloud:index/volume:Volume::control-plane-1-state",
        "urn:pulumi:prod::raya::hcloud:index/volume:Volume::control-plane-2-state",
    ]
    printed = "\n".join(standin.printed()[1])
    assert "control-plane-1 deleted" not in printed and "control-plane-2 " not in printed


# ---- Hetzner's catalogue per location: deprecations and stock (tests/cloud/hetzner_api.py) ----

PASSED = {"announced": "2025-01-01T00:00:00Z", "unavailable_after": "2025-06-01T00:00:00Z"}
COMING = {"announced": "2026-06-01T00:00:00Z", "unavailable_after": "2099-01-01T00:00:00Z"}


def test_a_type_deprecated_past_in_its_location_is_refused_before_pulumi(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The example fleet: agents cx23, cx23, cx33 in nbg1, the control plane cx33.
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "fsn1"), {"deprecation": PASSED})
    assert invoke(["preview", "--root", str(project)]).exit_code == 0  # another location's
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "nbg1"), {"deprecation": PASSED})
    for action in ("preview", "up"):
        result = invoke([action, "--root", str(project)])
        assert result.exit_code == 1
        assert str(result.exception) == (
            f"{project / 'deploy' / 'fleet' / 'agents.json'}: agents[0] is 'cx23', which "
            "Hetzner no longer sells in nbg1: deprecated there (announced 2025-01-01 00:00 UTC),"
            " unavailable after 2025-06-01 00:00 UTC; accepted: a type sold in nbg1; nothing "
            "changed"
        )
    assert [run[0] for run in standin.operations()] == ["preview"]
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "nbg1"), {})
    monkeypatch.setitem(hetzner_api.STATES, ("cx33", "nbg1"), {"deprecation": PASSED})
    with pytest.raises(DeployError, match=r"raya:controlPlaneServerType is 'cx33', which Het"):
        deploy.run("preview", project, "prod", lambda line: None)


def test_an_announced_deprecation_is_warned_of_with_its_date(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "nbg1"), {"deprecation": COMING})
    printed: list[str] = []
    deploy.run("up", project, "prod", printed.append)
    assert [run[0] for run in standin.operations()] == ["up"]
    (warning,) = [line for line in printed if line.startswith("warning: Hetzner deprecated")]
    assert warning == (
        "warning: Hetzner deprecated cx23 in nbg1 (announced 2026-06-01 00:00 UTC): after "
        "2099-01-01 00:00 UTC no server of it can be created there, so agent-0, agent-1 could "
        "then not be replaced (raya roll, up --replace) nor their pool grown; move them to "
        "another type before then"
    )
    # Out of stock is no mistake in the inputs: an update without replacements goes on.
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "nbg1"), {"available": False})
    printed.clear()
    deploy.run("up", project, "prod", printed.append)
    assert not [line for line in printed if line.startswith("warning: Hetzner")]


def with_autoscaled_pool(project: Path, server_type: str) -> Path:
    """The example project with autoscaled pool `burst` of `server_type` (in raya:location,
    nbg1) and the autoscaler's token; its fleet file."""
    token = base64.b64encode(b"autoscalerToken0" * 4).decode()
    stack = project / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text() + f"  raya:autoscalerHcloudToken:\n    secure: {token}\n")
    fleet = project / "deploy" / "fleet" / "agents.json"
    pool = {"name": "burst", "type": server_type, "min": 1, "max": 4, "addresses": "10.0.16.0/24"}
    fleet.write_text(json.dumps({**json.loads(fleet.read_text()), "pools": [pool]}))
    return fleet


def test_an_autoscaled_pools_type_is_asked_of_hetzner_and_refused_once_deprecated_past(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The example fleet (cx23, cx23, cx33; control plane cx33) and a pool of cpx31, which
    # only the pool runs: Hetzner sells it in nbg1 (tests/cloud/hetzner_api.py), and it is
    # asked for (not taken for a type Hetzner does not offer).
    fleet = with_autoscaled_pool(project, "cpx31")
    assert invoke(["preview", "--root", str(project)]).exit_code == 0
    # The autoscaler creates its servers there: past the deprecation, Hetzner refuses them.
    monkeypatch.setitem(hetzner_api.STATES, ("cpx31", "nbg1"), {"deprecation": PASSED})
    for action in ("preview", "up"):
        result = invoke([action, "--root", str(project)])
        assert result.exit_code == 1
        assert str(result.exception) == (
            f"{fleet}: pool burst: field 'type' is 'cpx31', which Hetzner no longer sells in "
            "nbg1: deprecated there (announced 2025-01-01 00:00 UTC), unavailable after "
            "2025-06-01 00:00 UTC; accepted: a type sold in nbg1; nothing changed"
        )
    assert [run[0] for run in standin.operations()] == ["preview"]


def test_an_announced_deprecation_names_the_autoscaled_pools_it_runs(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_autoscaled_pool(project, "cx23")  # the type of agent-0 and agent-1 too
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "nbg1"), {"deprecation": COMING})
    printed: list[str] = []
    deploy.run("preview", project, "prod", printed.append)
    (warning,) = [line for line in printed if line.startswith("warning: Hetzner deprecated")]
    assert warning == (
        "warning: Hetzner deprecated cx23 in nbg1 (announced 2026-06-01 00:00 UTC): after "
        "2099-01-01 00:00 UTC no server of it can be created there, so agent-0, agent-1 could "
        "then not be replaced (raya roll, up --replace) nor their pool grown; and the cluster "
        "autoscaler could then add no node to autoscaled pool burst; move them to another "
        "type before then"
    )


def test_up_replace_refuses_a_node_whose_type_cannot_be_created_there_now(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy.run("up", project, "prod", lambda line: None)
    servers = dict(standin.backend().hetzner["servers"])
    monkeypatch.setitem(hetzner_api.STATES, ("cx23", "nbg1"), {"available": False})
    result = invoke(["up", "--replace", "agent-0", "--root", str(project)])
    assert result.exit_code == 1
    assert str(result.exception) == (
        "agent-0: a new cx23 server cannot be created in nbg1 now (Hetzner has none in stock "
        "there now (available: false)), so its server is left as it is rather than deleted: "
        "retry once it is back in stock, or give the node a type sold there"
    )
    assert [run[0] for run in standin.operations()] == ["up"]  # no shutdown, no update
    assert standin.backend().hetzner["servers"] == servers
    # agent-2 is a cx33, in stock in nbg1: its replacement goes ahead.
    deploy.run("up", project, "prod", lambda line: None, replace=("agent-2",))
    assert [run[0] for run in standin.operations()] == ["up", "up"]


@pytest.mark.parametrize(
    ("state", "why"),
    [
        ({"available": False}, "Hetzner has none in stock there now (available: false)"),
        ({"deprecation": PASSED}, "deprecated there, unavailable after 2025-06-01 00:00 UTC"),
    ],
)
def test_roll_refuses_before_its_first_action(
    project: Path, monkeypatch: pytest.MonkeyPatch, state: dict[str, Any], why: str
) -> None:
    from raya.operate import roll as roll_model

    built: list[dict[str, Any]] = []
    monkeypatch.setattr(roll_model, "Roll", lambda **settings: built.append(settings))
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: built.append({}))
    monkeypatch.setitem(hetzner_api.STATES, ("cx33", "nbg1"), state)
    result = invoke(["roll", "agent-0", "agent-2", "--root", str(project)])
    assert result.exit_code == 1
    assert str(result.exception) == (
        f"agent-2: a new cx33 server cannot be created in nbg1 now ({why}), so its server is "
        "left as it is rather than deleted: retry once it is back in stock, or give the node "
        "a type sold there"
    )
    assert built == []  # neither the cluster's API asked nor a single node drained


# --- Previews without the stack's secrets (a pull request's: docs/security.md) ---------------

# The cluster's Hetzner token the `project` fixture sets, `secure:` in its stack file.
CLUSTER_TOKEN = "hcloudTestToken0" * 4
NODES = ["control-plane", "agent-0", "agent-1", "agent-2"]


def test_no_pulumi_preview_starts_without_the_passphrase(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why a pull request's preview cannot be Pulumi's: the CLI decrypts the stack's config
    and its whole state before the engine starts."""
    deploy.run("up", project, "prod", lambda line: None)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    with pytest.raises(DeployError) as error:
        deploy.run("preview", project, "prod", lambda line: None)
    assert "passphrase must be set with PULUMI_CONFIG_PASSPHRASE" in str(error.value)
    assert str(error.value).endswith("`raya preview --without-secrets` decrypts nothing")
    assert [run[0] for run in standin.operations()] == ["up"]


def test_a_preview_without_secrets_decrypts_nothing_and_still_shows_drift(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hetzner's API serves the snapshots the engine model's program chose from (42, newest).
    snapshots = provider_mocks().snapshots
    monkeypatch.setattr(hetzner_api, "SNAPSHOTS", snapshots)
    deploy.run("up", project, "prod", lambda line: None)
    secrets = [*secret_values(standin.backend()), CLUSTER_TOKEN]
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    mark = len(standin.calls())
    lines: list[str] = []

    same = deploy.preview_without_secrets(project, "prod", lines.append)
    assert (same.drift, same.arriving, same.leaving) == ({}, (), ())

    stack_file = project / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text().replace("    - octo-bob\n",
                                                         "    - octo-bob\n    - octo-carol\n"))
    users = deploy.preview_without_secrets(project, "prod", lines.append)
    assert users.drift == {node: ("users",) for node in NODES}

    snapshots.append(Snapshot(50, LABELS, created="2026-12-01T00:00:00+00:00"))
    both = deploy.preview_without_secrets(project, "prod", lines.append)
    assert both.drift == {node: ("users", "image") for node in NODES}

    fleet = project / "deploy" / "fleet" / "agents.json"
    document = json.loads(fleet.read_text())
    document["agents"] = [*document["agents"], document["agents"][0]]
    fleet.write_text(json.dumps(document))
    grown = deploy.preview_without_secrets(project, "prod", lines.append)
    assert grown.arriving == ("agent-3",)

    # The CLI was asked for the stack and its state, sealed: nothing that decrypts.
    assert standin.calls()[mark:] == [
        ["stack", "select", "--stack", "prod"], ["stack", "export", "--stack", "prod"]
    ] * 4
    sealed = json.dumps(standin_pulumi.export("prod", show_secrets=False))
    assert secrets and [s for s in secrets if s in sealed] == []
    assert [s for s in secrets if s in "\n".join(lines)] == []


def test_raya_preview_without_secrets_prints_each_drifting_node(
    project: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hetzner_api, "SNAPSHOTS", provider_mocks().snapshots)
    deploy.run("up", project, "prod", lambda line: None)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    monkeypatch.setattr(hetzner_api, "SNAPSHOTS", [])  # a pin bump: main builds its snapshot
    result = invoke(["preview", "--without-secrets", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert "no snapshot for the pins yet" in result.output
    assert "preview of stack prod without secrets: nodes to create: none" in result.output
    for node in NODES:
        assert f"drift: {node} runs other image than the inputs render" in result.output
    # Without HCLOUD_TOKEN it says what it needs, before asking the CLI anything.
    monkeypatch.delenv("HCLOUD_TOKEN")
    mark = len(standin.calls())
    refused = invoke(["preview", "--without-secrets", "--root", str(project)])
    assert refused.exit_code != 0
    assert "HCLOUD_TOKEN (a token with Read permission suffices), which is not set" in (
        refused.output
    )
    assert standin.calls()[mark:] == []


class Ticking:
    """A clock read by raya's progress: five seconds later at each reading."""

    def __init__(self) -> None:
        self.seconds = -5.0

    def __call__(self) -> float:
        self.seconds += 5
        return self.seconds


class Leaves:
    """A `deploy.Removal` with nothing to drain: the stand-in has no cluster."""

    def before(self, leaving: Any, kubeconfig: str | None) -> None: ...

    def confirm(self, leaving: Any) -> None: ...

    def after(self, leaving: Any) -> None: ...


def test_up_counts_its_server_steps_with_what_is_left_and_the_time_elapsed(
    project: Path, standin: Standin
) -> None:
    """A line each time the engine is done with a server (not one per resource of the 45),
    then a summary; the clock read once at the start, once per line."""
    shown: list[str] = []
    deploy.run("up", project, "prod", lambda line: None, on_progress=shown.append, now=Ticking())
    steps, summary = shown[:-1], shown[-1]
    assert [line.split("] ")[0] + "]" for line in steps] == [
        "[1/4 server steps done, 0:00:05 elapsed, 3 left]",
        "[2/4 server steps done, 0:00:10 elapsed, 2 left]",
        "[3/4 server steps done, 0:00:15 elapsed, 1 left]",
        "[4/4 server steps done, 0:00:20 elapsed, 0 left]",
    ]
    assert sorted(line.split("] ")[1] for line in steps) == [
        "agent-0: server created", "agent-1: server created", "agent-2: server created",
        "control-plane: server created",
    ]  # fmt: skip
    assert summary == "servers: 4 created, 0 replaced, 0 deleted in 0:00:25"
    # The pool's server arrives, the list's three leave, the control plane is replaced:
    # six steps, a replacement's two halves apart.
    (project / "deploy" / "fleet" / "agents.json").write_text(json.dumps(POOL_ONLY))
    shown.clear()
    deploy.run("up", project, "prod", lambda line: None, replace=("control-plane",),
               removal=Leaves(), on_progress=shown.append, now=Ticking())  # fmt: skip
    counts = [line.split("] ")[0] + "]" for line in shown[:-1]]
    assert counts == [f"[{n}/6 server steps done, 0:00:{5 * n:02d} elapsed, {6 - n} left]"
                      for n in range(1, 7)]  # fmt: skip
    assert sorted(line.split("] ")[1] for line in shown[:-1]) == [
        "agent-0: server deleted", "agent-1: server deleted", "agent-2: server deleted",
        "control-plane: replacing its server: the new one created",
        "control-plane: replacing its server: the old one deleted",
        "web-0: server created",
    ]  # fmt: skip
    assert shown[-1] == "servers: 1 created, 1 replaced, 3 deleted in 0:00:35"
    assert [s for s in secret_values(standin.backend()) if s in "\n".join(shown)] == []


def test_a_targeted_update_counts_only_its_replacements(project: Path, standin: Standin) -> None:
    deploy.run("up", project, "prod", lambda line: None)
    shown: list[str] = []
    deploy.run("up", project, "prod", lambda line: None, replace=("agent-1", "agent-2"),
               targeted=True, on_progress=shown.append, now=Ticking())  # fmt: skip
    assert [line.split("] ")[0] + "]" for line in shown[:-1]] == [
        f"[{n}/4 server steps done, 0:00:{5 * n:02d} elapsed, {4 - n} left]" for n in (1, 2, 3, 4)
    ]
    assert shown[-1] == "servers: 0 created, 2 replaced, 0 deleted in 0:00:25"


# Issue 39: the cluster autoscaler's servers, which no Pulumi resource holds.
NODE_GROUP = "hcloud/node-group"


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    """The example project as stack `prod`, deployed once through the engine model, whose
    Hetzner model the API stand-in serves; raya's polls a tenth of a second apart."""
    example = provider_mocks()
    deployed = deployed_cloud(project, monkeypatch, example.zones, example.snapshots)
    monkeypatch.setattr(deploy, "SHUTDOWN_POLL", 0.1)
    return deployed


WEB = Pool("web", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"), min_size=0, max_size=4)


def autoscaled(cloud: Cloud, name: str, address: str, cluster: str = "raya") -> Server:
    """A server of pool web as the cluster autoscaler 1.36.1 creates it from the config raya
    deployed (tests/operate/autoscaler_double.py, `create_server`: the pool's server labels
    and its node group's label; a firewall applied directly only if raya's environment for
    it sets `HCLOUD_FIREWALL`)."""
    config, env = deployed_config(cluster, (WEB,)), deployed_env(cluster, (WEB,))
    server: Server = autoscaler_double.create_server(
        cloud.hetzner, config, env, f"{cluster}-web", name, (address,)
    )
    return server


def test_an_autoscaled_server_is_behind_the_clusters_firewall_by_its_label_only(
    cloud: Cloud,
) -> None:
    """Like a planned node: a firewall applied directly too would lock the server
    (`firewall_managed_by_label_selector`, tests/cloud/program/hetzner.py)."""
    made = autoscaled(cloud, "raya-web-1f", "10.0.16.70")
    assert made.firewalls == ()  # nothing applied directly
    assert cloud.hetzner.firewalls_of(made) == {"raya": "managed_by=raya"}
    planned = cloud.hetzner.server_named("raya-control-plane")
    assert planned is not None and planned.firewalls == ()
    assert cloud.hetzner.firewalls_of(planned) == {"raya": "managed_by=raya"}
    # Another cluster's autoscaled server is not behind this cluster's firewall.
    other = autoscaled(cloud, "other-web-3d", "10.9.0.2", cluster="other")
    assert cloud.hetzner.firewalls_of(other) == {}


def test_destroy_deletes_the_autoscalers_servers_first_and_counts_them(cloud: Cloud) -> None:
    made = autoscaled(cloud, "raya-web-1f", "10.0.16.70")
    # What 1.36.1 labels it with: its group's label and the pool's server labels raya set.
    assert made.labels == {NODE_GROUP: "raya-web", "managed_by": "raya", "role": "agent",
                           "pool": "web"}  # fmt: skip
    autoscaled(cloud, "raya-web-2e", "10.0.16.71")
    autoscaled(cloud, "other-web-3d", "10.9.0.2", cluster="other")  # another cluster's
    mark = len(cloud.hetzner.log)
    result = deploy.run("destroy", cloud.root, "prod", lambda line: None)
    assert result.autoscaled == ("raya-web-1f", "raya-web-2e")
    assert [s.name for s in cloud.hetzner.servers.values()] == ["other-web-3d"]
    assert cloud.hetzner.requests == ["delete raya-web-1f", "delete raya-web-2e"]
    log = cloud.since(mark)
    # Hetzner deletes them later (an action), and raya waited for that before the engine
    # started: the firewall they held was deleted after them.
    assert log[:4] == [
        "deleting server raya-web-1f",
        "deleting server raya-web-2e",
        "delete server raya-web-1f (deleting)",
        "delete server raya-web-2e (deleting)",
    ]
    assert "delete firewall raya" in log and "delete server raya-control-plane (off)" in log


def test_a_server_the_autoscaler_deleted_meanwhile_is_not_counted(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    autoscaled(cloud, "raya-web-1f", "10.0.16.70")
    gone = autoscaled(cloud, "raya-web-2e", "10.0.16.71")
    listed = deploy.autoscaled_servers

    def late(client: Any, cluster_name: str) -> list[Any]:
        # The list answered; then the autoscaler deleted raya-web-2e before raya asked to.
        found = listed(client, cluster_name)
        if gone.id in cloud.hetzner.servers:
            cloud.hetzner.delete_server(gone.id)
        return found

    monkeypatch.setattr(deploy, "autoscaled_servers", late)
    result = deploy.run("destroy", cloud.root, "prod", lambda line: None)
    assert result.autoscaled == ("raya-web-1f",)
    # Asked for both; Hetzner answered not_found for the one already gone.
    assert cloud.hetzner.requests == ["delete raya-web-1f"]
    assert f"DELETE /v1/servers/{gone.id}" in hetzner_api.BUDGET.requests
    assert cloud.hetzner.servers == {}


def test_without_raya_the_engines_destroy_leaves_autoscaled_servers_running_unfirewalled(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why they go first: no resource of the stack holds them, and the engine's destroy goes
    on around them: the provider takes the firewall off every server its label selector
    covers before deleting it (terraform-provider-hcloud, `resourceFirewallDelete`), so
    they would run on, billed, behind no firewall."""
    made = autoscaled(cloud, "raya-web-1f", "10.0.16.70")
    monkeypatch.setattr(deploy, "delete_autoscaled", lambda root, name, stack: ())
    mark = len(cloud.hetzner.log)
    deploy.run("destroy", cloud.root, "prod", lambda line: None)
    assert list(cloud.hetzner.servers.values()) == [made] and made.status == "running"
    assert cloud.hetzner.firewalls == {} and cloud.hetzner.firewalls_of(made) == {}
    assert "remove firewall raya from raya-web-1f" in cloud.since(mark)


def test_raya_destroy_says_how_many_autoscaled_servers_it_deleted_and_asks_first(
    cloud: Cloud,
) -> None:
    autoscaled(cloud, "raya-web-1f", "10.0.16.70")
    refused = invoke(["destroy", "--root", str(cloud.root)], input="n\n")
    assert refused.exit_code == 1
    assert "the cluster autoscaler's too" in refused.stderr
    assert cloud.hetzner.requests == [] and cloud.hetzner.server_named("raya-web-1f")
    agreed = invoke(["destroy", "--root", str(cloud.root)], input="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert "deleted 1 server(s) the cluster autoscaler made: raya-web-1f" in agreed.stdout
    assert cloud.hetzner.servers == {}


def test_up_refuses_while_servers_of_a_pool_no_longer_autoscaled_exist(cloud: Cloud) -> None:
    server = autoscaled(cloud, "raya-web-1f", "10.0.16.70")
    autoscaled(cloud, "other-web-3d", "10.9.0.2", cluster="other")  # not this cluster's
    mark, runs = len(cloud.hetzner.log), len(cloud.stack.calls)
    with pytest.raises(DeployError) as caught:
        cloud.up()
    assert str(caught.value) == (
        f"{cloud.root / 'deploy' / 'fleet' / 'agents.json'}: servers the cluster autoscaler "
        "made for pools no longer autoscaled still exist (pool web (node group raya-web): "
        "raya-web-1f), and nothing would delete them: keep each such pool with min 0 until "
        "the autoscaler has removed them (`raya status` counts them), or delete them "
        "(`hcloud server delete <name>`), then run again; nothing changed"
    )
    assert cloud.since(mark) == [] and cloud.stack.calls[runs:] == []
    cloud.hetzner.delete_server(server.id)
    cloud.up()
    assert cloud.stack.calls[runs:] == [("export", ()), ("up", ())]


def test_servers_of_a_group_the_inputs_still_autoscale_are_no_orphans() -> None:
    def server(name: str, group: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, labels={NODE_GROUP: group, "managed_by": "raya"})

    listed = [server("raya-burst-1a", "raya-burst"), server("raya-web-2b", "raya-web"),
              server("raya-web-1c", "raya-web")]  # fmt: skip
    # FLEET autoscales pool burst (node group raya-burst), not web.
    assert deploy.orphaned_groups(AUTOSCALED_FLEET, listed) == {
        "raya-web": ["raya-web-1c", "raya-web-2b"]
    }
    assert deploy.orphaned_groups(AUTOSCALED_FLEET, listed[:1]) == {}
