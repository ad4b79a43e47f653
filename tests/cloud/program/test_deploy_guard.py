"""`raya.cloud.deploy.run` beyond the plain wiring: drift picked from the engine's events, the
protected-resources guard on recorded preview events, `replace=` (URNs, the program's
environment, unprotecting first) and a destroy that unprotects everything it deletes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from raya.cloud import deploy
from raya.cloud import kit as recovery
from raya.cloud.program import REPLACE_ENV
from raya.errors import DeployError
from tests.cloud.program.engine import update_summary
from tests.cloud.program.kits import example_kit
from tests.runner import invoke

EVENTS = Path(__file__).parent / "events"
CP_URN = "urn:pulumi:prod::raya::hcloud:index/server:Server::control-plane"
AGENT_URN = "urn:pulumi:prod::raya::hcloud:index/server:Server::agent-1"
VOLUME_URN = "urn:pulumi:prod::raya::hcloud:index/volume:Volume::control-plane-state"


def recorded(name: str) -> list[auto.EngineEvent]:
    lines = (EVENTS / name).read_text().splitlines()
    return [auto.EngineEvent.from_json(json.loads(line)) for line in lines]


class Workspace:
    def __init__(self) -> None:
        self.env_vars: dict[str, str] = {}


class RecordedStack:
    """Answers like `auto.Stack`: its previews play `events` (a recorded event log)."""

    def __init__(self, events: list[auto.EngineEvent]) -> None:
        self.events = events
        self.workspace = Workspace()
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.state = auto.Deployment(
            version=3,
            deployment={
                "resources": [
                    {"urn": CP_URN, "protect": True},
                    {"urn": VOLUME_URN, "protect": True},
                    {"urn": AGENT_URN},
                ]
            },
        )
        self.imported: list[list[dict[str, Any]]] = []

    def _play(self, action: str, kwargs: dict[str, Any]) -> None:
        self.calls.append((action, {**kwargs, "env": dict(self.workspace.env_vars)}))
        for event in self.events:
            if kwargs.get("on_event"):
                kwargs["on_event"](event)

    def preview(self, **kwargs: Any) -> auto.PreviewResult:
        self._play("preview", kwargs)
        return auto.PreviewResult("", "", {auto.OpType.SAME: 26})

    def up(self, **kwargs: Any) -> auto.UpResult:
        self._play("up", kwargs)
        # An update of raya's program exports the recovery kit (written by `raya up`).
        kit = auto.OutputValue(recovery.document(example_kit()), secret=True)
        summary = update_summary("update", {auto.OpType.SAME: 26})
        return auto.UpResult("", "", summary, {"recoveryKit": kit})

    def get_config(self, key: str) -> auto.ConfigValue:
        """`pulumi config get` of a key the stack does not set: the CLI's error."""
        message = f"error: configuration key '{key}' not found for stack 'prod'"
        raise auto.CommandError(auto.CommandResult(stdout="", stderr=message, code=255))

    def destroy(self, **kwargs: Any) -> auto.DestroyResult:
        self.calls.append(("destroy", kwargs))
        return auto.DestroyResult("", "", update_summary("destroy", {auto.OpType.DELETE: 26}))

    def outputs(self) -> dict[str, auto.OutputValue]:
        return {"kubeconfig": auto.OutputValue("apiVersion: v1", secret=True)}

    def export_stack(self) -> auto.Deployment:
        self.calls.append(("export_stack", {}))
        return auto.Deployment(
            version=self.state.version, deployment=json.loads(json.dumps(self.state.deployment))
        )

    def import_stack(self, state: auto.Deployment) -> None:
        self.calls.append(("import_stack", {}))
        assert state.deployment is not None
        self.imported.append(list(state.deployment["resources"]))
        self.state = state



def stack_playing(monkeypatch: pytest.MonkeyPatch, name: str) -> RecordedStack:
    stack = RecordedStack(recorded(name))
    monkeypatch.setattr(deploy, "open_stack", lambda root, stack_name, create: stack)
    return stack


def test_drift_reported_by_the_program_is_collected_per_node(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_playing(monkeypatch, "drift-users.jsonl")
    for action in ("preview", "up"):
        result = deploy.run(action, project, "prod", lambda line: None)
        assert result.drift == {
            node: ("users",) for node in ("agent-0", "agent-1", "agent-2", "control-plane")
        }


def test_raya_up_prints_the_drift_per_node(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack_playing(monkeypatch, "drift-users.jsonl")
    result = invoke(["up", "--root", str(project)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("drift: ")]
    assert lines[0] == (
        "drift: agent-0 runs other users than the inputs render; left as it is "
        "(docs/deploy.md, Day two)"
    )
    assert len(lines) == 4


def test_the_guard_refuses_before_anything_changes(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = stack_playing(monkeypatch, "replaces-protected.jsonl")
    with pytest.raises(DeployError) as error:
        deploy.run("up", project, "prod", lambda line: None, no_destroy_protected=True)
    # The state read (nodes leaving), no up, the state untouched.
    assert [action for action, _ in stack.calls] == ["export_stack", "preview"]
    message = str(error.value)
    assert message.startswith("up of stack prod refused, nothing changed: its preview would ")
    assert "the control plane (control-plane, hcloud:index/server:Server): replace" in message
    assert "the DNS zone (primary, gcp:dns/managedZone:ManagedZone): replace" in message
    volume = "the control plane's volume (control-plane-state, hcloud:index/volume:Volume)"
    assert f"{volume}: delete" in message
    # An agent's replacement and the network's in-place update are no reason to refuse.
    assert "agent-1" not in message and "the network" not in message


def test_the_guard_names_each_protected_resource_once() -> None:
    problems = deploy.protected_changes(recorded("replaces-protected.jsonl"))
    assert len(problems) == 3


def test_the_guard_lets_a_clean_preview_through(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = stack_playing(monkeypatch, "drift-users.jsonl")
    deploy.run("up", project, "prod", lambda line: None, no_destroy_protected=True)
    assert [action for action, _ in stack.calls] == ["export_stack", "preview", "up"]


def test_without_the_flag_there_is_no_preview_first(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = stack_playing(monkeypatch, "replaces-protected.jsonl")
    deploy.run("up", project, "prod", lambda line: None)
    assert [action for action, _ in stack.calls] == ["export_stack", "up"]


def test_the_cli_flag_reaches_the_guard(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack_playing(monkeypatch, "replaces-protected.jsonl")
    result = invoke(["up", "--no-destroy-protected", "--root", str(project)])
    # raya.cli.main turns it into one line on stderr and exit 1, as for every RayaError.
    assert isinstance(result.exception, DeployError)
    assert "refused, nothing changed" in str(result.exception)


def test_replace_exempts_only_the_servers_it_names_from_the_guard(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = stack_playing(monkeypatch, "replaces-protected.jsonl")
    with pytest.raises(DeployError) as error:
        deploy.run(
            "up",
            project,
            "prod",
            lambda line: None,
            replace=("control-plane",),
            no_destroy_protected=True,
        )
    assert "the control plane (" not in str(error.value)
    assert "the DNS zone" in str(error.value) and "volume" in str(error.value)
    # Nor was anything unprotected (no import).
    assert [action for action, _ in stack.calls] == ["export_stack", "preview"]


def test_replace_of_the_named_nodes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = stack_playing(monkeypatch, "drift-users.jsonl")
    deploy.run(
        "up", project, "prod", lambda line: None, replace=("control-plane", "agent-1")
    )
    # The state read for nodes leaving, then read and written to unprotect.
    actions = [action for action, _ in stack.calls]
    assert actions == ["export_stack", "export_stack", "import_stack", "up"]
    _, options = stack.calls[-1]
    assert options["replace"] == [CP_URN, AGENT_URN]
    assert options["env"] == {REPLACE_ENV: "control-plane,agent-1"}
    (resources,) = stack.imported
    assert {r["urn"]: r.get("protect") for r in resources} == {
        CP_URN: False,  # unprotected for its replacement
        VOLUME_URN: True,  # never: the replacement VM boots onto it
        AGENT_URN: None,
    }


def test_preview_of_a_replacement_changes_no_state(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = stack_playing(monkeypatch, "drift-users.jsonl")
    deploy.run("preview", project, "prod", lambda line: None, replace=("agent-1",))
    assert [action for action, _ in stack.calls] == ["export_stack", "preview"]
    assert stack.calls[1][1]["replace"] == [AGENT_URN]


@pytest.mark.parametrize(
    ("action", "replace", "message"),
    [
        ("up", ("agent-7",), "replace: agent-7 is not a node of cluster raya; accepted: "),
        ("destroy", ("agent-1",), "replace: a destroy replaces nothing"),
    ],
)
def test_replace_refuses_what_it_cannot_do(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    action: deploy.Action,
    replace: tuple[str, ...],
    message: str,
) -> None:
    stack = stack_playing(monkeypatch, "drift-users.jsonl")
    with pytest.raises(DeployError, match=message):
        deploy.run(action, project, "prod", lambda line: None, replace=replace)
    assert stack.calls == []


def test_the_guard_allows_the_servers_replace_names(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [
        event
        for event in recorded("replaces-protected.jsonl")
        if event.resource_pre_event is None
        or event.resource_pre_event.metadata.type == "hcloud:index/server:Server"
    ]
    assert deploy.protected_changes(events) != []
    assert deploy.protected_changes(events, {"control-plane"}) == []


def test_destroy_unprotects_everything_first(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = stack_playing(monkeypatch, "drift-users.jsonl")
    deploy.run("destroy", project, "prod", lambda line: None)
    assert [action for action, _ in stack.calls] == ["export_stack", "import_stack", "destroy"]
    (resources,) = stack.imported
    assert not any(resource.get("protect") for resource in resources)


def test_the_subnet_counts_as_the_network() -> None:
    event = auto.EngineEvent.from_json(
        {
            "sequence": 1,
            "timestamp": 1764500001,
            "resourcePreEvent": {
                "metadata": {
                    "op": "delete",
                    "urn": "urn:pulumi:prod::raya::hcloud:index/networkSubnet:NetworkSubnet::nodes",
                    "type": "hcloud:index/networkSubnet:NetworkSubnet",
                    "provider": "",
                }
            },
        }
    )
    assert deploy.protected_changes([event]) == [
        "the network's subnet (nodes, hcloud:index/networkSubnet:NetworkSubnet): delete"
    ]


def test_previews_leave_out_a_leaving_control_planes_protected_server_and_volume(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The state holds control-plane-1 (and its volume), protected; the inputs have one
    # control plane. The engine would refuse to delete them even in a preview.
    stack = stack_playing(monkeypatch, "drift-users.jsonl")
    server = CP_URN.replace("::control-plane", "::control-plane-1")
    volume = VOLUME_URN.replace("::control-plane-state", "::control-plane-1-state")
    assert stack.state.deployment is not None
    resources = [
        *stack.state.deployment["resources"],
        {"urn": server, "type": deploy.SERVER_TYPE, "protect": True},
        {"urn": volume, "type": deploy.VOLUME_TYPE, "protect": True},
    ]
    stack.state = auto.Deployment(version=3, deployment={"resources": resources})
    result = deploy.run("preview", project, "prod", lambda line: None)
    assert result.leaving == ("control-plane-1",)
    (preview,) = [options for action, options in stack.calls if action == "preview"]
    assert preview["exclude"] == [server, volume] and preview["exclude_dependents"] is True
    # The guard's preview too, and `up` lifts their protection (theirs only) before Pulumi.
    removal = Hooks()
    deploy.run(
        "up", project, "prod", lambda line: None, no_destroy_protected=True, removal=removal
    )
    (guard,) = [options for action, options in stack.calls[2:] if action == "preview"]
    assert guard["exclude"] == [server, volume]
    (imported,) = stack.imported
    assert {r["urn"]: r.get("protect") for r in imported} == {
        CP_URN: True, VOLUME_URN: True, AGENT_URN: None, server: False, volume: False
    }
    assert removal.calls == [
        ("before", ("control-plane-1",)),
        ("confirm", ("control-plane-1",)),
        ("after", ("control-plane-1",)),
    ]


def test_in_the_public_mode_a_leaving_control_planes_address_leaves_with_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The public mode protects a control plane's primary IP as its volume
    # (raya.cloud.program.network): leaving, it is left out of previews and unprotected by
    # `up` with them. The stack file adds the mode to the example's settings.
    stack_file = project / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text() + "  raya:network: public\n")
    stack = stack_playing(monkeypatch, "drift-users.jsonl")
    server = CP_URN.replace("::control-plane", "::control-plane-1")
    volume = VOLUME_URN.replace("::control-plane-state", "::control-plane-1-state")
    address = f"urn:pulumi:prod::raya::{deploy.PRIMARY_IP_TYPE}::control-plane-1-ipv4"
    assert stack.state.deployment is not None
    resources = [
        *stack.state.deployment["resources"],
        {"urn": server, "type": deploy.SERVER_TYPE, "protect": True},
        {"urn": volume, "type": deploy.VOLUME_TYPE, "protect": True},
        {"urn": address, "type": deploy.PRIMARY_IP_TYPE, "protect": True},
    ]
    stack.state = auto.Deployment(version=3, deployment={"resources": resources})
    result = deploy.run("preview", project, "prod", lambda line: None)
    assert result.leaving == ("control-plane-1",)
    (preview,) = [options for action, options in stack.calls if action == "preview"]
    assert preview["exclude"] == sorted([server, volume, address])
    deploy.run("up", project, "prod", lambda line: None, removal=Hooks())
    (imported,) = stack.imported
    assert {r["urn"]: r.get("protect") for r in imported if "control-plane-1" in r["urn"]} == {
        server: False, volume: False, address: False
    }


class Hooks:
    """A `deploy.Removal` that records what it is asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def before(self, leaving: Any, kubeconfig: str | None) -> None:
        assert kubeconfig == "apiVersion: v1"  # the stack's, for the API
        self.calls.append(("before", tuple(leaving)))

    def confirm(self, leaving: Any) -> None:
        self.calls.append(("confirm", tuple(leaving)))

    def after(self, leaving: Any) -> None:
        self.calls.append(("after", tuple(leaving)))


class FailingImport(RecordedStack):
    """`import_stack` as the SDK's LocalWorkspace does it (pulumi automation
    `_local_workspace.py`, `import_stack`): the state, secrets decrypted, dumped to a
    `NamedTemporaryFile(delete=False)`, then `pulumi stack import --file`, and the file
    removed only after the command succeeded; here the command fails."""

    written: list[str]

    def import_stack(self, state: auto.Deployment) -> None:
        with tempfile.NamedTemporaryFile(mode="w", delete=False) as file:
            json.dump(state.__dict__, file)
        self.written = [file.name]
        raise auto.CommandError(auto.CommandResult("", "error: the backend is unreachable", 255))


def test_a_failed_import_leaves_no_plaintext_state_behind(tmp_path: Path) -> None:
    stack = FailingImport(recorded("replaces-protected.jsonl"))
    with pytest.raises(auto.CommandError):
        deploy._unprotect(stack, None)  # type: ignore[arg-type]
    (written,) = stack.written
    assert not Path(written).exists(), written
    assert tempfile.gettempdir() != str(Path(written).parent)  # the default restored
