"""Day-two options at values other than their defaults, read back where the command hands
them on: the file written, the roll's and the removal's settings. What each then does is the
operate layer's tests' (test_roll.py, test_remove.py); these fail when the command drops an
option or passes its default instead (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from raya.cloud import deploy
from raya.operate import remove
from raya.operate import roll as rl
from tests.cloud.program.mocks import Run
from tests.runner import invoke


def test_kubeconfig_out_writes_where_asked_and_nowhere_else(
    deployed: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "Pulumi.yaml").write_text("name: raya\n")
    monkeypatch.chdir(tmp_path / "project")
    target = tmp_path / "elsewhere" / "admin.yaml"
    target.parent.mkdir()
    result = invoke(["kubeconfig", "--out", str(target)])
    assert result.exit_code == 0, result.output
    assert target.stat().st_mode & 0o777 == 0o600
    assert yaml.safe_load(target.read_text()) == yaml.safe_load(deployed.outputs["kubeconfig"])
    assert not (tmp_path / "home" / ".kube").exists()  # the default place stays untouched


class Recorded:
    """Stands in for a class of the operate layer: keeps the settings it is built with."""

    def __init__(self) -> None:
        self.built: list[dict[str, Any]] = []

    def __call__(self, **settings: Any) -> SimpleNamespace:
        self.built.append(settings)
        return SimpleNamespace(run=lambda steps: None)


def test_roll_hands_its_timeouts_and_nodes_on(
    project: Path, deployed: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    roll = Recorded()
    monkeypatch.setattr(rl, "Roll", roll)
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setattr("raya.commands.operate.kube_api_client", lambda text: None)
    result = invoke(["roll", "agent-1", "--root", str(project), "--drain-timeout", "42.5",
                     "--ready-timeout", "7", "--accept-local-data-loss"])  # fmt: skip
    assert result.exit_code == 0, result.output
    ((settings,),) = [roll.built]
    assert (settings["drain_timeout"], settings["ready_timeout"]) == (42.5, 7.0)
    assert settings["accept_local_loss"] is True
    lines = result.stdout.splitlines()
    assert lines[0] == "agent-1:" and "  3. cordon" in lines  # its steps, printed first
    # Without the options: the documented default drain timeout (docs/using.md), 600 s.
    invoke(["roll", "agent-1", "--root", str(project)])
    assert (roll.built[1]["drain_timeout"], roll.built[1]["accept_local_loss"]) == (600.0, False)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], {"accept_local_loss": False, "without_drain": False}),
        (["--accept-local-data-loss"], {"accept_local_loss": True, "without_drain": False}),
        (["--delete-without-drain"], {"accept_local_loss": False, "without_drain": True}),
        (["--accept-volume-downtime"], {"accept_volume_downtime": True, "without_drain": False}),
        ([], {"accept_volume_downtime": False}),
    ],
)
def test_up_hands_its_removal_options_on(
    project: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], expected: dict[str, bool]
) -> None:
    seen: list[remove.Removal] = []

    def run(action: str, root: Path, stack: str, on_output: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["removal"])
        return deploy.Result(changes={}, outputs={})

    monkeypatch.setattr(deploy, "run", run)
    # What `up` does after the update (the recovery kit, the autoscaler's objects, the bucket
    # check) is test_recovery_kit.py's, test_autoscaler_apply.py's and test_up_backups.py's.
    monkeypatch.setattr("raya.commands.deploy.write_recovery_kit", lambda *_: None)
    monkeypatch.setattr("raya.commands.deploy.deliver_autoscaler", lambda *_: None)
    monkeypatch.setattr("raya.commands.deploy.check_backups", lambda *_: None)
    result = invoke(["up", "--root", str(project), *flags])
    assert result.exit_code == 0, result.output
    ((removal,),) = [seen]
    assert {key: getattr(removal, key) for key in expected} == expected


@pytest.mark.parametrize("command", [["up"], ["status"], ["roll"], ["kubeconfig"]])
def test_a_root_that_is_not_a_folder_is_refused_before_anything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setattr(deploy, "run", pytest.fail)
    monkeypatch.setattr(deploy, "stack_outputs", pytest.fail)
    missing = tmp_path / "not-there"
    result = invoke([*command, "--root", str(missing)])
    assert result.exit_code == 1
    assert str(result.exception) == f"{missing}: no such folder (--root)"
