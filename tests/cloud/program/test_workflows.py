"""The CI workflows run commands that exist, in the order the deployment needs, and hold
the Hetzner token and the GCP identity the way zizmor, a static analyser, asks: every action
pinned to a commit, no persisted credentials, least permissions."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.runner import invoke
from tests.support import REPO, require_tool

WORKFLOWS = REPO / ".github" / "workflows"
NAMES = sorted(path.name for path in WORKFLOWS.glob("*.yml"))
ZIZMOR = str(Path(sys.executable).parent / "zizmor")


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
        result = invoke([*args, "--help"])
        assert result.exit_code == 0, (args, result.output)


def test_pull_requests_test_validate_and_preview() -> None:
    workflow = load("pull-request.yml")
    assert runs(workflow, "test") == [".ci/run"]
    assert any(line.startswith("packer validate") for line in runs(workflow, "packer"))
    assert runs(workflow, "preview") == ["./raya preview --stack prod --without-secrets"]


def test_main_builds_the_image_then_deploys_one_run_at_a_time() -> None:
    workflow = load("main.yml")
    assert workflow["concurrency"]["cancel-in-progress"] is False
    assert runs(workflow, "deploy") == [
        "./raya image build --stack prod",
        # CI never replaces nor deletes the control plane, its volume, network or zone.
        "./raya up --stack prod --no-destroy-protected",
    ]
    assert workflow["jobs"]["deploy"]["needs"] == ["test"]


# Production's credentials, as the production environment holds them (docs/deploy.md): the
# write token, the deploy identity and the passphrase that decrypts the state.
PRODUCTION = {
    "secrets.HCLOUD_TOKEN",
    "vars.GCP_DEPLOY_SERVICE_ACCOUNT",
    "secrets.PULUMI_CONFIG_PASSPHRASE",
}


def references(node: Any) -> set[str]:
    """Every `secrets.X` and `vars.X` an expression in `node` names."""
    text = yaml.safe_dump(node)
    return set(re.findall(r"\$\{\{\s*((?:secrets|vars)\.\w+)\s*\}\}", text))


def test_production_is_deployed_from_main_only_with_its_own_environment() -> None:
    workflow = load("main.yml")
    # `on:` reads as True in YAML 1.1; a dispatch may name any branch, so the job must check.
    assert "workflow_dispatch" in workflow[True]  # type: ignore[index]
    deploy = workflow["jobs"]["deploy"]
    assert deploy["if"] == "github.ref == 'refs/heads/main'"
    assert deploy["environment"] == "production"
    assert references(deploy) >= PRODUCTION
    # No other job of any workflow names the environment or a production credential.
    for name in NAMES:
        for job_name, job in load(name)["jobs"].items():
            if (name, job_name) != ("main.yml", "deploy"):
                assert "environment" not in job, (name, job_name)
                assert not PRODUCTION & references(job), (name, job_name)


def test_the_preview_uses_read_only_credentials() -> None:
    preview = load("pull-request.yml")["jobs"]["preview"]
    assert preview["env"]["HCLOUD_TOKEN"] == "${{ secrets.HCLOUD_READ_TOKEN }}"
    (auth,) = [step for step in preview["steps"] if "/auth@" in step.get("uses", "")]
    assert auth["with"]["service_account"] == "${{ vars.GCP_PREVIEW_SERVICE_ACCOUNT }}"


# Which job reads which secret and variable: the table of docs/security.md, "Credentials".
READS = {
    ("pull-request.yml", "test"): set(),
    ("pull-request.yml", "packer"): set(),
    ("pull-request.yml", "preview"): {
        "secrets.HCLOUD_READ_TOKEN",
        "vars.PULUMI_BACKEND_URL",
        "vars.GCP_WORKLOAD_IDENTITY_PROVIDER",
        "vars.GCP_PREVIEW_SERVICE_ACCOUNT",
    },
    ("main.yml", "test"): set(),
    ("main.yml", "deploy"): {
        "secrets.HCLOUD_TOKEN",
        "secrets.PULUMI_CONFIG_PASSPHRASE",
        "vars.GOOGLE_PROJECT",
        "vars.PULUMI_BACKEND_URL",
        "vars.GCP_WORKLOAD_IDENTITY_PROVIDER",
        "vars.GCP_DEPLOY_SERVICE_ACCOUNT",
    },
    ("pins.yml", "propose"): set(),  # the workflow's own token, `github.token`
}


def test_each_job_reads_exactly_the_secrets_the_security_table_gives_it() -> None:
    found = {
        (name, job_name): references(job)
        for name in NAMES
        for job_name, job in load(name)["jobs"].items()
    }
    assert found == READS


def test_the_security_page_names_each_jobs_secrets() -> None:
    """docs/security.md's table of jobs says what READS says (names without `secrets.` or
    `vars.`; a cell may name several jobs of one workflow: `test, packer`)."""
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    table = text[text.index("| job | secrets and variables | decrypts |") :].split("\n\n")[0]
    documented: dict[tuple[str, str], set[str]] = {}
    for line in table.splitlines()[2:]:
        job, names, _ = (cell.strip() for cell in line.strip("|").split(" | "))
        workflow = re.findall(r"`([\w-]+\.yml)`", job)[0]
        jobs = job.split("`")[2].split("(")[0]
        for name in (part.strip() for part in jobs.split(",")):
            documented[(workflow, name)] = set(re.findall(r"`(\w+)`", names))
    assert documented == {
        key: {reference.split(".", 1)[1] for reference in value} for key, value in READS.items()
    }


def test_only_the_deploy_job_can_decrypt_the_state() -> None:
    """The passphrase reaches one job, through the production environment; the preview runs
    without it, and says so to raya (`--without-secrets`: a Pulumi preview cannot start
    without the passphrase)."""
    holders = []
    for name in NAMES:
        for job_name, job in load(name)["jobs"].items():
            text = yaml.safe_dump(job)
            if "PULUMI_CONFIG_PASSPHRASE" in text:  # the secret, the variable or its _FILE
                holders.append((name, job_name))
    assert holders == [("main.yml", "deploy")]
    deploy = load("main.yml")["jobs"]["deploy"]
    assert deploy["environment"] == "production"
    assert deploy["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    preview = load("pull-request.yml")["jobs"]["preview"]
    assert "environment" not in preview
    for line in runs(load("pull-request.yml"), "preview"):
        if line.startswith("./raya preview"):
            assert "--without-secrets" in shlex.split(line)


def test_pins_are_bumped_weekly_by_pull_request() -> None:
    workflow = load("pins.yml")
    triggers: dict[str, Any] = workflow.get(True, {})  # type: ignore[call-overload]
    assert triggers["schedule"]  # `on:` reads as True in YAML 1.1
    (update,) = [line for line in runs(workflow, "propose") if line.startswith("./raya")]
    result = invoke([*shlex.split(update.split("|")[0])[1:], "--help"])
    assert result.exit_code == 0, result.output
    assert "gh pr create" in runs(workflow, "propose")[-1]
    assert workflow["jobs"]["propose"]["permissions"] == {
        "contents": "write",
        "pull-requests": "write",
    }


@pytest.mark.parametrize("name", NAMES)
def test_every_action_is_pinned_and_no_job_has_more_than_it_asks(name: str) -> None:
    workflow = load(name)
    text = (WORKFLOWS / name).read_text()
    uses = re.findall(r"uses: (\S+)(.*)", text)
    assert uses
    for reference, comment in uses:
        # A full commit hash, and the release it is in a comment for the reader.
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", reference), reference
        assert re.match(r"\s+# v\d+\.\d+\.\d+", comment), (reference, comment)
    assert workflow["permissions"] == {}
    for job in workflow["jobs"].values():
        assert "permissions" in job
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def _zizmor(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("zizmor", ZIZMOR), "--offline", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_zizmor_finds_nothing(tmp_path: Path) -> None:
    result = _zizmor(WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr
    # Every workflow was audited (zizmor logs each one it completes).
    assert all(f"completed {WORKFLOWS / name}" in result.stderr for name in NAMES), result.stderr
    # ...and it would: the same workflows with a movable tag and persisted credentials.
    text = (WORKFLOWS / "main.yml").read_text()
    text = re.sub(r"actions/checkout@[0-9a-f]{40}", "actions/checkout@v4", text)
    weakened = tmp_path / "main.yml"
    weakened.write_text(text.replace("persist-credentials: false", "fetch-depth: 1"))
    result = _zizmor(weakened)
    assert result.returncode != 0
    assert "unpinned-uses" in result.stdout and "artipacked" in result.stdout
