"""The CI workflows run commands that exist, in the order the deployment needs."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from raya.cli import app
from tests.support import REPO

WORKFLOWS = REPO / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return document


def runs(workflow: dict[str, Any], job: str) -> list[str]:
    return [step["run"] for step in workflow["jobs"][job]["steps"] if "run" in step]


@pytest.mark.parametrize("name", ["pull-request.yml", "main.yml"])
def test_every_raya_step_is_a_valid_command_line(name: str) -> None:
    workflow = load(name)
    lines = [line for job in workflow["jobs"] for line in runs(workflow, job)]
    raya_lines = [shlex.split(line)[1:] for line in lines if line.startswith("./raya ")]
    assert raya_lines
    for args in raya_lines:
        # --help after the options: Click still parses them, so a wrong name fails here.
        result = CliRunner().invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)


def test_pull_requests_test_validate_and_preview() -> None:
    workflow = load("pull-request.yml")
    assert runs(workflow, "test") == [".ci/run"]
    assert any(line.startswith("packer validate") for line in runs(workflow, "packer"))
    assert runs(workflow, "preview") == ["./raya preview --stack prod"]


def test_main_builds_the_image_then_deploys_one_run_at_a_time() -> None:
    workflow = load("main.yml")
    assert workflow["concurrency"]["cancel-in-progress"] is False
    assert runs(workflow, "deploy") == [
        "./raya image build --stack prod",
        # CI never replaces nor deletes the control plane, its volume, network or zone.
        "./raya up --stack prod --no-destroy-protected",
    ]
    assert workflow["jobs"]["deploy"]["needs"] == ["test"]
