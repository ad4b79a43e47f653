"""The program as Pulumi runs it: stack config through `pulumi.Config`, the fleet and pins from
the project, the users' keys fetched from a (local) GitHub."""

from __future__ import annotations

import dataclasses
import json
import runpy
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pulumi
import pytest
import yaml

from raya.cloud.program import REPLACE_ENV, main
from raya.errors import ConfigError, DeployError, KeysError
from raya.model.pins import (
    ChartPin,
    chart_pins_path,
    dump_chart_pins,
    load_chart_pins,
    load_pins,
    snapshot_labels,
)
from raya.model.project import EXAMPLE_ROOT
from raya.nodes.render import SSH_HANDLES_FILE
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import (
    ProviderMocks,
    Snapshot,
    Zone,
    is_secret,
    reveal,
    run_program,
)
from tests.cloud.program.test_program import CLUSTER_TOKEN
from tests.support import EXAMPLE_KEYS, REPO

# The keys the `github` fixture serves (tests/conftest.py): a test may change them.
KEYS = EXAMPLE_KEYS
# A key of another user: what a key rotation on GitHub looks like from here.
EXAMPLE_OTHER_KEY = KEYS["octo-bob"].splitlines()[0] + "\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE_ROOT / "deploy", tmp_path / "deploy")
    shutil.copytree(
        REPO / "image", tmp_path / "image", ignore=shutil.ignore_patterns("*.hcl", "*.sh")
    )
    return tmp_path


@pytest.fixture
def stack_config() -> Iterator[dict[str, str]]:
    values = {
        "raya:clusterName": "kube",
        "raya:location": "hel1",
        "raya:authorizedUsers": json.dumps(sorted(KEYS)),
        "raya:managedSubdomain": "k8s",
        "raya:parentZone": "example.com",
        "raya:acmeEmail": "ops@example.org",
        "raya:clusterHcloudToken": CLUSTER_TOKEN,
    }
    yield values
    pulumi.runtime.set_all_config({})


def mocks(root: Path) -> ProviderMocks:
    labels = snapshot_labels(load_pins(root), "kube")
    return ProviderMocks(
        zones=[Zone("example-com", "example.com.")], snapshots=[Snapshot(7, labels)]
    )


def test_main_reads_the_stack_and_fetches_keys(
    project: Path, github: list[str], stack_config: dict[str, str]
) -> None:
    pulumi.runtime.set_all_config(stack_config)
    result = run_program(mocks(project), lambda: main(project))
    assert sorted(github) == sorted(f"/{handle}.keys" for handle in KEYS)
    inputs = {name: reveal(r.inputs) for name, r in result.resources.items()}
    assert inputs["primary"]["dnsName"] == "k8s.example.com."
    assert inputs["network"]["name"] == "kube"
    assert inputs["nodes"]["networkZone"] == "eu-central"
    servers = sorted(name for name, r in result.resources.items() if r.typ.endswith(":Server"))
    assert servers == ["agent-0", "agent-1", "agent-2", "control-plane"]
    assert inputs["control-plane"]["location"] == "hel1"
    assert inputs["agent-0"]["image"] == "7"
    # The keys GitHub served were checked, and are carried by no node: they fetch them.
    for server in servers:
        user_data = inputs[server]["userData"]
        ignition = json.loads(user_data)
        assert ignition["passwd"]["users"] == [{"name": "core"}]
        assert ignition_files(user_data)[SSH_HANDLES_FILE].decode().splitlines() == sorted(KEYS)
        for body in KEYS.values():
            for line in filter(None, body.splitlines()):
                assert line.split()[1] not in user_data


def test_the_cluster_token_from_the_stack_reaches_the_control_plane_only(
    project: Path, github: list[str], stack_config: dict[str, str]
) -> None:
    pulumi.runtime.set_all_config(stack_config)
    result = run_program(mocks(project), lambda: main(project))
    secret_file = "/var/lib/raya/k3s-server-seed/manifests/raya-hcloud-credentials.yaml"
    for name, resource in result.resources.items():
        if not resource.typ.endswith(":Server"):
            continue
        assert is_secret(resource.inputs["userData"]), name
        files = ignition_files(reveal(resource.inputs["userData"]))
        holding = [path for path, data in files.items() if CLUSTER_TOKEN.encode() in data]
        assert holding == ([secret_file] if name == "control-plane" else []), name
    assert CLUSTER_TOKEN not in json.dumps(result.outputs, default=str)


def test_a_stack_without_the_cluster_token_declares_nothing(
    project: Path, github: list[str], stack_config: dict[str, str]
) -> None:
    del stack_config["raya:clusterHcloudToken"]
    pulumi.runtime.set_all_config(stack_config)
    targets = mocks(project)
    with pytest.raises(pulumi.ConfigMissingError, match="raya:clusterHcloudToken"):
        run_program(targets, lambda: main(project))
    assert targets.resources == {}


def test_a_user_rotating_keys_on_github_changes_nothing(
    project: Path, github: list[str], stack_config: dict[str, str]
) -> None:
    pulumi.runtime.set_all_config(stack_config)
    targets = mocks(project)
    before = run_program(targets, lambda: main(project))
    handle = sorted(KEYS)[0]
    KEYS[handle], original = EXAMPLE_OTHER_KEY, KEYS[handle]
    try:
        after = run_program(targets, lambda: main(project))
    finally:
        KEYS[handle] = original
    assert after.replaced == []
    for name, resource in before.resources.items():
        assert reveal(after.resources[name].inputs) == reveal(resource.inputs), name


def test_a_handle_without_keys_fails_before_anything_is_declared(
    project: Path, github: list[str], stack_config: dict[str, str]
) -> None:
    handle = sorted(KEYS)[0]
    KEYS[handle], original = "\n", KEYS[handle]  # an empty keys page
    pulumi.runtime.set_all_config(stack_config)
    targets = mocks(project)
    try:
        with pytest.raises(KeysError, match=f"{handle} has no SSH keys"):
            run_program(targets, lambda: main(project))
    finally:
        KEYS[handle] = original
    assert targets.resources == {}


def test_main_replaces_the_nodes_raya_deploy_names(
    project: Path,
    github: list[str],
    stack_config: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pulumi.runtime.set_all_config(stack_config)
    targets = mocks(project)
    run_program(targets, lambda: main(project))
    monkeypatch.setenv(REPLACE_ENV, "agent-2,control-plane")
    result = run_program(targets, lambda: main(project))
    lifted = sorted(name for name, r in result.resources.items() if r.typ.endswith(":Server")
                    and not r.options.ignore_changes)  # fmt: skip
    assert lifted == ["agent-2", "control-plane"]
    monkeypatch.setenv(REPLACE_ENV, "agent-9")
    with pytest.raises(DeployError, match="replace: agent-9 is not a node of cluster kube"):
        run_program(mocks(project), lambda: main(project))


def test_main_reads_lists_and_booleans_as_pulumi_stores_them(
    project: Path, github: list[str], stack_config: dict[str, str]
) -> None:
    stack_config["raya:sshSources"] = '["203.0.113.0/24"]'
    stack_config["raya:controlPlaneSchedulable"] = "true"
    pulumi.runtime.set_all_config(stack_config)
    result = run_program(mocks(project), lambda: main(project))
    rules = reveal(result.resources["firewall"].inputs)["rules"]
    assert {rule.get("port"): rule["sourceIps"] for rule in rules}["22"] == ["203.0.113.0/24"]
    user_data = reveal(result.resources["control-plane"].inputs)["userData"]
    assert b"node-taint" not in ignition_files(user_data)["/etc/rancher/k3s/config.yaml"]


def test_main_installs_the_projects_chart_pins_with_the_stacks_settings(
    project: Path, github: list[str], stack_config: dict[str, str]
) -> None:
    pins = load_chart_pins(project)
    bumped = dataclasses.replace(
        pins, external_dns=ChartPin(version="9.8.7", digest=pins.external_dns.digest)
    )
    chart_pins_path(project).write_text(dump_chart_pins(bumped))
    pulumi.runtime.set_all_config({**stack_config, "raya:acmeEmail": "dns-team@example.net"})
    result = run_program(mocks(project), lambda: main(project))
    user_data = reveal(result.resources["control-plane"].inputs["userData"])
    files = ignition_files(user_data)
    manifests = "/var/lib/raya/k3s-server-seed/manifests"  # copied onto the volume at boot
    charts = {
        doc["metadata"]["name"]: doc["spec"]
        for doc in yaml.safe_load_all(files[f"{manifests}/raya-helm-charts.yaml"])
        if doc["kind"] != "StorageClass"
    }
    assert charts["external-dns"]["version"] == "9.8.7"
    assert charts["cert-manager"]["version"] == pins.cert_manager.version
    assert "- k8s.example.com" in charts["external-dns"]["valuesContent"]
    issuers = list(yaml.safe_load_all(files[f"{manifests}/raya-cluster-issuers.yaml"]))
    assert [issuer["spec"]["acme"]["email"] for issuer in issuers] == ["dns-team@example.net"] * 2


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("raya:location", "mars1", "stack test: raya:location is 'mars1'"),
        ("raya:parentZone", None, "stack test: raya:parentZone is required"),
        (
            "raya:authorizedUsers",
            '["octo-alice", "octo alice"]',
            "'octo alice', not a GitHub login",
        ),
        # Lists reach the program as JSON text, a top-level scalar as the text written.
        ("raya:sshSources", '["203.0.113.0/33"]', "raya:sshSources has '203.0.113.0/33'"),
        ("raya:controlPlaneSchedulable", "yes", "raya:controlPlaneSchedulable is 'yes'"),
    ],
)
def test_main_rejects_a_bad_stack_config(
    project: Path,
    github: list[str],
    stack_config: dict[str, str],
    key: str,
    value: str | None,
    message: str,
) -> None:
    if value is None:
        del stack_config[key]
    else:
        stack_config[key] = value
    pulumi.runtime.set_all_config(stack_config)
    targets = mocks(project)
    with pytest.raises(ConfigError, match=message):
        run_program(targets, lambda: main(project))
    assert targets.resources == {} and github == []


PROGRAM = REPO / "src" / "raya" / "cloud" / "program"


def run_as_pulumi_does(targets: ProviderMocks) -> None:
    """Pulumi's Python host runs the `main:` folder with runpy, from the project folder."""

    def program() -> None:
        runpy.run_path(str(PROGRAM), run_name="__main__")

    run_program(targets, program)


def test_the_folder_pulumi_runs(
    project: Path,
    github: list[str],
    stack_config: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (project / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    monkeypatch.chdir(project)
    pulumi.runtime.set_all_config(stack_config)
    targets = mocks(project)
    run_as_pulumi_does(targets)
    assert reveal(targets.resources["primary"].inputs)["dnsName"] == "k8s.example.com."
    assert str(PROGRAM) not in sys.path

    # Bad input: Pulumi shows a RunError as its message, without a traceback.
    stack_config["raya:location"] = "mars1"
    pulumi.runtime.set_all_config(stack_config)
    with pytest.raises(pulumi.RunError, match=r"^stack test: raya:location is 'mars1'"):
        run_as_pulumi_does(mocks(project))
