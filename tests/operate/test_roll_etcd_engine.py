"""`raya roll` of three control planes end to end: the command, the real program with
`raya:controlPlanes: 3` replaced through the engine and Hetzner models
(tests/cloud/program/engine.py, hetzner.py), and the Kubernetes stand-in with its etcd section
(tests/operate/kube_api.py) over real TLS, one clock for the roll and the stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raya.cloud.kubeconfig import api_client
from raya.operate import roll as rl
from tests.cloud.program.engine import Cloud, deployed_cloud
from tests.cloud.program.test_program import PINS, provider_mocks
from tests.operate import kube_api as ka
from tests.operate.test_roll import BOOT, OLD, Clock
from tests.runner import invoke

CONTROL_PLANES = {
    "control-plane": "10.0.1.10",
    "control-plane-1": "10.0.1.11",
    "control-plane-2": "10.0.1.12",
}


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    config = project / "Pulumi.prod.yaml"
    config.write_text(config.read_text() + "  raya:controlPlanes: 3\n")
    example = provider_mocks()
    return deployed_cloud(project, monkeypatch, example.zones, example.snapshots)


@pytest.fixture
def cluster(cloud: Cloud, clock: Clock) -> ka.Cluster:
    """Three voting control planes and three agents on an old k3s; Hetzner's deletions and
    creations reach the stand-in's machines."""
    nodes = [*CONTROL_PLANES, "agent-0", "agent-1", "agent-2"]
    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in nodes}, clock=clock.now, boot=BOOT
    )
    ka.Etcd.of(state, CONTROL_PLANES)
    cloud.hetzner.on_delete = lambda server: state.server_deleted(server.removeprefix("raya-"))
    cloud.hetzner.on_create = lambda server: state.server_created(
        server.removeprefix("raya-"), PINS.k3s.version
    )
    return state


@pytest.fixture
def roll(
    cloud: Cloud, cluster: ka.Cluster, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """The command's arguments before the node names; the API and the clock patched in."""
    with ka.deployment_api(cluster, cloud.engine.resources, tmp_path) as url:
        for command in ("operate", "deploy"):  # `raya roll`, and `raya up --replace`
            monkeypatch.setattr(
                f"raya.commands.{command}.kube_api_client",
                lambda text: api_client(text, server=url),
            )
        monkeypatch.setattr(rl, "Clock", lambda: clock)
        yield ["roll", "--root", str(cloud.root)]


def test_the_command_rolls_three_control_planes_one_at_a_time(
    cloud: Cloud, cluster: ka.Cluster, roll: list[str]
) -> None:
    mark = len(cloud.hetzner.log)
    result = invoke([*roll, *CONTROL_PLANES])
    assert result.exit_code == 0, result.output
    # Each server stopped, deleted, created and given its volume back before the next begins.
    assert cloud.since(mark) == [
        line
        for name in CONTROL_PLANES
        for line in (
            f"shutdown server raya-{name}",
            f"detach volume raya-{name}-state (server deleted)",
            f"delete server raya-{name} (off)",
            f"create server raya-{name}",
            f"attach volume raya-{name}-state to raya-{name}",
        )
    ]
    created = {text.split(":")[0]: t for t, text in cluster.events if text.endswith("created")}
    voters = [
        (t, text.split()[1])
        for t, text in cluster.events
        if text.startswith("etcd: control-plane") and text.endswith(" voter") and t > 0
    ]
    # control-plane-1's server was created only after control-plane was a voter again, and
    # control-plane-2's after control-plane-1.
    back = {name: t for t, name in voters}
    assert back["control-plane"] <= created["control-plane-1"]
    assert back["control-plane-1"] <= created["control-plane-2"]
    for name in CONTROL_PLANES:
        assert f"{name}: rejoined etcd as a new member ({name}-" in result.output
    assert "rolled 3 node(s)" in result.stdout


def test_the_command_refuses_while_another_control_plane_is_down(
    cloud: Cloud, cluster: ka.Cluster, clock: Clock, roll: list[str]
) -> None:
    # control-plane-2's host died a minute ago (not through Hetzner's API: the log is raya's).
    cluster.server_deleted("control-plane-2")
    clock.t += 60
    mark = len(cloud.hetzner.log)
    result = invoke([*roll, "control-plane-1", "agent-0"])
    assert isinstance(result.exception, rl.RollError)
    assert str(result.exception).startswith(
        "control-plane-1: refused before any change: control-plane-2 is unhealthy, not Ready"
    )
    assert cloud.since(mark) == []  # nothing replaced
    assert cluster.nodes["agent-0"]["spec"]["unschedulable"] is False  # nor cordoned


@pytest.fixture
def up(cloud: Cloud, roll: list[str]) -> list[str]:
    """`raya up`'s arguments; its API client reaches the stand-in (`roll`)."""
    return ["up", "--root", str(cloud.root)]


def test_up_replacing_two_control_planes_is_refused_before_anything_changes(
    cloud: Cloud, cluster: ka.Cluster, up: list[str]
) -> None:
    mark, calls = len(cloud.hetzner.log), len(cloud.stack.calls)
    result = invoke([*up, "--replace", "control-plane-1", "--replace", "control-plane-2"])
    assert result.exit_code == 1
    assert "replace: control-plane-1, control-plane-2 are control planes" in result.output
    assert "replace one at a time" in result.output
    assert cloud.since(mark) == []
    assert cloud.stack.calls[calls:] == []  # no preview, no update: Pulumi never ran
    assert [method for _, method, _ in cluster.log if method != "GET"] == []


def test_up_replacing_a_control_plane_while_another_is_down_is_refused(
    cloud: Cloud, cluster: ka.Cluster, clock: Clock, up: list[str]
) -> None:
    # control-plane-2's host died a minute ago: replacing control-plane-1 now would leave one
    # voter of three running.
    cluster.server_deleted("control-plane-2")
    clock.t += 60
    mark = len(cloud.hetzner.log)
    result = invoke([*up, "--replace", "control-plane-1"])
    assert result.exit_code == 1
    assert (
        "replace refused, nothing changed: control-plane-2 is unhealthy, not Ready" in result.output
    )
    assert cloud.since(mark) == []
    # With every other one a voter on a Ready node, it goes ahead.
    cluster.server_created("control-plane-2", OLD)
    clock.t += BOOT + 30
    result = invoke([*up, "--replace", "control-plane-1"])
    assert result.exit_code == 0, result.output
    assert "delete server raya-control-plane-1 (off)" in cloud.since(mark)


def test_a_control_plane_that_does_not_shut_down_stops_the_roll_undeleted(
    cloud: Cloud, cluster: ka.Cluster, roll: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # control-plane-1's OS does not act on the ACPI shutdown: the hcloud provider would delete
    # it running after about 31 s, a member cut off mid-write; raya stops instead.
    from raya.cloud import deploy

    monkeypatch.setattr(deploy, "SHUTDOWN_TIMEOUT", 0.5)
    monkeypatch.setattr(deploy, "SHUTDOWN_POLL", 0.05)
    hung = cloud.hetzner.server_named("raya-control-plane-1")
    assert hung is not None
    hung.acpi = False
    mark = len(cloud.hetzner.log)
    result = invoke([*roll, "control-plane-1", "control-plane-2"])
    assert isinstance(result.exception, rl.RollError)
    text = str(result.exception)
    assert text.startswith(
        "control-plane-1: control-plane-1: server raya-control-plane-1 is still running 0.5 s "
        "after an ACPI shutdown, so it was not deleted"
    )
    assert text.endswith(
        "its replacement did not finish: see `raya status`, then `raya roll control-plane-1`; "
        "not touched: control-plane-2"
    )
    assert cloud.since(mark) == ["shutdown server raya-control-plane-1 (no effect)"]
    assert cluster.etcd is not None and len(cluster.etcd.members) == 3
