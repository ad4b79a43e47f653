"""`raya preview | up | destroy` wiring, without the Pulumi CLI: a stand-in stack records what
raya asks of the Automation API; the CLI detection runs against stand-in `pulumi` binaries."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto
from typer.testing import CliRunner

from raya import deploy
from raya.cli import app
from raya.errors import ConfigError, DeployError
from raya.project import EXAMPLE_ROOT
from tests.support import REPO

SECRET = "s3cr3t-never-printed"


def summary(changes: dict[auto.OpType, int]) -> auto.UpdateSummary:
    return auto.UpdateSummary(
        kind="update",
        start_time=None,  # type: ignore[arg-type]
        message="",
        environment={},
        config={},
        result="succeeded",
        end_time=None,
        version=2,
        deployment=None,
        resource_changes=changes,
    )


class FakeStack:
    """Answers like `auto.Stack`, printing what the CLI would (secrets masked)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    def _run(self, action: str, kwargs: dict[str, Any]) -> None:
        self.calls.append((action, kwargs))
        kwargs["on_output"](f"Updating ({action}):")
        kwargs["on_output"](
            "  + hcloud:index/server:Server control-plane create userData: [secret]"
        )
        if self.fail:
            raise auto.CommandError(
                auto._cmd.CommandResult(
                    stdout="", stderr="error: hcloud: server type cx99 not found", code=255
                )
            )

    def preview(self, **kwargs: Any) -> auto.PreviewResult:
        self._run("preview", kwargs)
        return auto.PreviewResult("", "", {auto.OpType.CREATE: 20, auto.OpType.SAME: 1})

    def up(self, **kwargs: Any) -> auto.UpResult:
        self._run("up", kwargs)
        outputs = {
            "nameServers": auto.OutputValue(["ns-cloud-a1.googledomains.com."], False),
            "token": auto.OutputValue(SECRET, True),
        }
        return auto.UpResult(
            "", "", summary({auto.OpType.CREATE: 20, auto.OpType.SAME: 1}), outputs
        )

    def destroy(self, **kwargs: Any) -> auto.DestroyResult:
        self._run("destroy", kwargs)
        return auto.DestroyResult("", "", summary({auto.OpType.DELETE: 21}))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    shutil.copy(EXAMPLE_ROOT / "Pulumi.example.yaml", tmp_path / "Pulumi.prod.yaml")
    shutil.copytree(EXAMPLE_ROOT / "deploy", tmp_path / "deploy")
    shutil.copytree(
        REPO / "image", tmp_path / "image", ignore=shutil.ignore_patterns("*.hcl", "*.sh")
    )
    return tmp_path


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, str, bool, FakeStack]]:
    """Every stack raya opens, as a FakeStack."""
    opened: list[tuple[Path, str, bool, FakeStack]] = []

    def open_stack(root: Path, name: str, create: bool) -> FakeStack:
        stack = FakeStack(fail=name == "failing")
        opened.append((root, name, create, stack))
        return stack

    monkeypatch.setattr(deploy, "open_stack", open_stack)
    return opened


def test_up_streams_progress_and_masks_secret_outputs(project: Path, opened: list[Any]) -> None:
    lines: list[str] = []
    result = deploy.run("up", project, "prod", lines.append)
    ((root, name, create, stack),) = opened
    assert (root, name, create) == (project, "prod", True)
    ((action, kwargs),) = stack.calls
    assert action == "up" and kwargs["color"] == "never"
    assert lines[0] == "Updating (up):"
    assert result.changes == {"create": 20, "same": 1}
    assert result.outputs == {
        "nameServers": '["ns-cloud-a1.googledomains.com."]',
        "token": "[secret]",
    }


def test_preview_counts_changes(project: Path, opened: list[Any]) -> None:
    result = deploy.run("preview", project, "prod", lambda line: None)
    assert result.changes == {"create": 20, "same": 1} and result.outputs == {}
    assert opened[0][3].calls[0][0] == "preview"


def test_destroy_never_creates_a_stack_nor_needs_valid_files(
    project: Path, opened: list[Any]
) -> None:
    (project / "deploy" / "fleet" / "agents.json").write_text("{}")
    result = deploy.run("destroy", project, "prod", lambda line: None)
    assert opened[0][2] is False
    assert result.changes == {"delete": 21}


def test_bad_stack_file_fails_before_pulumi_starts(project: Path, opened: list[Any]) -> None:
    stack_file = project / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text().replace("nbg1", "mars1"))
    with pytest.raises(ConfigError, match="raya:location is 'mars1'"):
        deploy.run("up", project, "prod", lambda line: None)
    with pytest.raises(ConfigError, match=r"Pulumi\.staging\.yaml: stack file not found"):
        deploy.run("up", project, "staging", lambda line: None)
    assert opened == []


def test_bad_chart_pins_fail_before_pulumi_starts(project: Path, opened: list[Any]) -> None:
    (project / "image" / "charts.pin").write_text("{}")
    with pytest.raises(ConfigError, match=r"charts\.pin: expected a JSON object with exactly"):
        deploy.run("preview", project, "prod", lambda line: None)
    assert opened == []


def test_engine_failure_is_one_deploy_error(project: Path, opened: list[Any]) -> None:
    shutil.copy(project / "Pulumi.prod.yaml", project / "Pulumi.failing.yaml")
    with pytest.raises(
        DeployError, match="pulumi up of stack failing failed: error: hcloud: server type cx99"
    ):
        deploy.run("up", project, "failing", lambda line: None)


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


def test_raya_up_prints_progress_summary_and_no_secret(project: Path, opened: list[Any]) -> None:
    result = CliRunner().invoke(app, ["up", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert "userData: [secret]" in result.output
    assert "up of stack prod: create 20, same 1" in result.output
    assert "token: [secret]" in result.output
    assert SECRET not in result.output


def test_raya_preview_takes_the_stack(project: Path, opened: list[Any]) -> None:
    shutil.copy(project / "Pulumi.prod.yaml", project / "Pulumi.staging.yaml")
    result = CliRunner().invoke(app, ["preview", "--stack", "staging", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert opened[0][1] == "staging"
    assert "preview of stack staging: create 20, same 1" in result.output


def test_raya_destroy_asks_first(project: Path, opened: list[Any]) -> None:
    refused = CliRunner().invoke(app, ["destroy", "--root", str(project)], input="n\n")
    assert refused.exit_code == 1 and opened == []
    agreed = CliRunner().invoke(app, ["destroy", "--root", str(project)], input="y\n")
    assert agreed.exit_code == 0, agreed.output
    yes = CliRunner().invoke(app, ["destroy", "--yes", "--root", str(project)])
    assert yes.exit_code == 0
    assert [stack.calls[0][0] for *_, stack in opened] == ["destroy", "destroy"]


def logging_pulumi(folder: Path, log: Path) -> None:
    """A `pulumi` that logs its arguments and knows exactly one stack, prod."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "pulumi"
    script.write_text(
        f"""#!/bin/sh
echo "$(pwd): $*" >> {log}
case "$*" in
  version) echo v3.200.0 ;;
  *"--stack prod"*) ;;
  *) echo "error: no stack named 'other' found" >&2; exit 255 ;;
esac
"""
    )
    script.chmod(0o755)


def test_open_stack_drives_the_cli_in_the_project(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "pulumi.log"
    logging_pulumi(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    stack = deploy.open_stack(project, "prod", True)
    assert stack.name == "prod"
    assert stack.workspace.work_dir == str(project)
    assert f"{project}: --non-interactive stack select --stack prod" in log.read_text().splitlines()
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
