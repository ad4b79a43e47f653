"""Replacement against the engine model and the Hetzner model (`engine.py`, `hetzner.py`):
`raya up`, `raya up --replace` and `raya.cloud.deploy.run(replace=)` drive the real program
through the engine's planning, and Hetzner's rules decide whether it works."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pulumi_hcloud as hcloud
import pytest
from pulumi import automation as auto

from raya.errors import DeployError
from tests.cloud.program.engine import Cloud, Engine, EngineError, deployed_cloud
from tests.cloud.program.hetzner import Hetzner, HetznerError
from tests.cloud.program.mocks import ProtectedError, run_program
from tests.cloud.program.test_program import provider_mocks, run
from tests.runner import invoke

URN = "urn:pulumi:prod::raya::{}::{}"
SERVER = "hcloud:index/server:Server"
ATTACHMENT = "hcloud:index/volumeAttachment:VolumeAttachment"
VOLUME = "hcloud:index/volume:Volume"
NODES = ("control-plane", "agent-0", "agent-1", "agent-2")


def server_ids(cloud: Cloud) -> dict[str, str]:
    return {name: cloud.engine.snapshot[URN.format(SERVER, name)].id for name in NODES}


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    """The example project as stack `prod`, deployed once through the engine model."""
    example = provider_mocks()
    return deployed_cloud(project, monkeypatch, example.zones, example.snapshots)


def test_the_first_up_creates_the_servers_and_attaches_the_volume(cloud: Cloud) -> None:
    assert sorted(s.name for s in cloud.hetzner.servers.values()) == [
        "raya-agent-0",
        "raya-agent-1",
        "raya-agent-2",
        "raya-control-plane",
    ]
    (volume,) = cloud.hetzner.volumes.values()
    assert cloud.hetzner.servers[volume.server or 0].name == "raya-control-plane"
    shutdowns = {
        name: cloud.engine.snapshot[URN.format(SERVER, name)].inputs["shutdownBeforeDeletion"]
        for name in NODES
    }
    assert shutdowns == dict.fromkeys(NODES, True)


def test_a_plain_up_asks_for_no_replacement_and_touches_no_server(cloud: Cloud) -> None:
    before, mark = server_ids(cloud), len(cloud.hetzner.log)
    result = invoke(["up", "--root", str(cloud.root)])
    assert result.exit_code == 0, result.output
    assert cloud.stack.calls[-1] == ("up", ())  # no replace target
    assert "kubeconfig: [secret]" in result.stdout  # the engine's outputs keep their secrecy
    assert cloud.since(mark) == []
    assert server_ids(cloud) == before
    assert {op for op, _ in cloud.engine.steps} == {"same"}


def test_replacing_an_agent_deletes_the_old_server_before_creating_the_new(
    cloud: Cloud,
) -> None:
    before, mark = server_ids(cloud), len(cloud.hetzner.log)
    result = invoke(["up", "--replace", "agent-1", "--root", str(cloud.root)])
    assert result.exit_code == 0, result.output
    assert cloud.stack.calls[-1] == ("up", (URN.format(SERVER, "agent-1"),))
    assert cloud.since(mark) == [
        "shutdown server raya-agent-1",
        "delete server raya-agent-1 (off)",
        "create server raya-agent-1",
    ]
    after = server_ids(cloud)
    assert after["agent-1"] != before["agent-1"]
    assert {n: i for n, i in after.items() if n != "agent-1"} == {
        n: i for n, i in before.items() if n != "agent-1"
    }
    # Its A record follows the new address, updated in place.
    assert ("update", "a1") in cloud.engine.steps


def test_replacing_the_control_plane_stops_it_then_moves_the_volume(cloud: Cloud) -> None:
    (volume,) = cloud.hetzner.volumes.values()
    mark = len(cloud.hetzner.log)
    cloud.up("control-plane")
    assert cloud.since(mark) == [
        "shutdown server raya-control-plane",
        "detach volume raya-control-plane-state (server deleted)",
        "delete server raya-control-plane (off)",
        "create server raya-control-plane",
        "attach volume raya-control-plane-state to raya-control-plane",
    ]
    assert list(cloud.hetzner.volumes.values()) == [volume]  # the same volume, its data
    new = cloud.hetzner.server_named("raya-control-plane")
    assert new is not None and volume.server == new.id
    # Unprotected for its replacement, the next `raya up` protects it again.
    assert cloud.engine.snapshot[URN.format(SERVER, "control-plane")].protect is False
    cloud.up()
    assert cloud.engine.snapshot[URN.format(SERVER, "control-plane")].protect is True
    assert cloud.engine.snapshot[URN.format(VOLUME, "control-plane-state")].protect is True


def test_the_engine_refuses_to_replace_a_protected_server(cloud: Cloud) -> None:
    """`pulumi up --replace` of the control plane without raya lifting its protection."""
    mark = len(cloud.hetzner.log)
    with pytest.raises(auto.CommandError, match="currently marked for protection"):
        cloud.stack.up(replace=[URN.format(SERVER, "control-plane")])
    assert cloud.since(mark) == []


def test_hetzners_refusal_fails_the_up_in_one_line(cloud: Cloud) -> None:
    """A server created by hand under the name a new agent would take."""
    cloud.hetzner.create_server("raya-agent-3", ())
    fleet = cloud.root / "deploy" / "fleet" / "agents.json"
    fleet.write_text(json.dumps({"agents": [*json.loads(fleet.read_text())["agents"], "cx23"]}))
    with pytest.raises(DeployError) as caught:
        cloud.up()
    assert str(caught.value) == (
        "pulumi up of stack prod failed: error: agent-3: server name raya-agent-3 is already "
        "used (uniqueness_error)"
    )


# The engine model alone, on small programs: what the engine and Hetzner do, whatever raya does.

WEB = URN.format(SERVER, "web")


def web(
    *,
    name: str = "web",
    image: str = "1",
    volume: pulumi.ResourceOptions | None = None,
    **options: Any,
) -> Callable[[], None]:
    """A named server with a fixed private IP, and with `volume`'s options an attached volume."""

    def program() -> None:
        server = hcloud.Server(
            "web",
            name=name,
            image=image,
            server_type="cx23",
            location="nbg1",
            networks=[hcloud.ServerNetworkArgs(network_id=1, ip="10.0.1.5")],
            opts=pulumi.ResourceOptions(**options),
        )
        if volume is not None:
            data = hcloud.Volume("data", name="data", size=10, location="nbg1")
            hcloud.VolumeAttachment(
                "data-attachment",
                server_id=server.id.apply(int),
                volume_id=data.id.apply(int),
                opts=volume,
            )

    return program


def deployed(program: Callable[[], None]) -> tuple[Engine, Hetzner]:
    hetzner = Hetzner()
    engine = Engine(hetzner, [], [])
    engine.update(program)
    hetzner.log.clear()
    return engine, hetzner


def test_a_targeted_replace_is_create_first_and_hetzner_refuses_the_name() -> None:
    engine, hetzner = deployed(web())
    with pytest.raises(EngineError, match=r"web: server name web is already used \(uniqueness"):
        engine.update(web(), replace=[WEB])
    assert hetzner.log == [] and [s.name for s in hetzner.servers.values()] == ["web"]


def test_a_second_server_cannot_take_a_held_private_ip() -> None:
    engine, _ = deployed(web())
    with pytest.raises(EngineError, match=r"IP 10.0.1.5 is not available \(held by web\)"):
        engine.update(web(name="www"), replace=[WEB])


def test_the_providers_delete_first_wish_counts_only_when_the_provider_is_asked() -> None:
    """A ForceNew change of a named server: the provider diff asks delete-first. A targeted
    replace of the same server: the provider is not asked, and the default is create-first."""
    engine, hetzner = deployed(web())
    engine.update(web(image="2"))
    assert hetzner.log == ["delete server web (running)", "create server web"]
    with pytest.raises(EngineError, match="already used"):
        engine.update(web(image="2"), replace=[WEB])


def test_delete_before_replace_deletes_the_dependents_then_the_server_first() -> None:
    attachment = pulumi.ResourceOptions()
    engine, hetzner = deployed(web(volume=attachment, delete_before_replace=True))
    engine.update(web(volume=attachment, delete_before_replace=True), replace=[WEB])
    # The attachment depends on the server's id, ForceNew: replaced along, deleted first.
    assert hetzner.log == [
        "detach volume data",
        "delete server web (running)",
        "create server web",
        "attach volume data to web",
    ]
    assert [name for op, name in engine.steps if op != "same"] == [
        "data-attachment",
        "web",
        "web",
        "data-attachment",
    ]


def test_a_retained_attachment_leaves_the_detach_to_the_servers_shutdown_and_deletion() -> None:
    attachment = pulumi.ResourceOptions(retain_on_delete=True)
    engine, hetzner = deployed(web(volume=attachment, delete_before_replace=True))
    program = web(volume=attachment, delete_before_replace=True)
    engine.update(program, replace=[WEB])
    assert hetzner.log == [
        "detach volume data (server deleted)",
        "delete server web (running)",
        "create server web",
        "attach volume data to web",
    ]


def test_a_volume_attaches_to_one_server_at_a_time() -> None:
    """Create-first, the new server is refused its name; were it not, the attachment would be
    refused the volume: it is still attached to the old server."""
    hetzner = Hetzner()
    first = hetzner.create_server("one", ("10.0.1.5",))
    second = hetzner.create_server("two", ("10.0.1.6",))
    volume = hetzner.create_volume("data")
    hetzner.attach(volume.id, first.id)
    with pytest.raises(HetznerError, match="already attached to a server, detach first"):
        hetzner.attach(volume.id, second.id)
    hetzner.delete_server(first.id)
    hetzner.attach(volume.id, second.id)
    assert volume.server == second.id


def test_protect_refuses_a_replacement_and_a_deletion() -> None:
    engine, hetzner = deployed(web(protect=True))
    with pytest.raises(EngineError, match="currently marked for protection"):
        engine.update(web(protect=True), replace=[WEB])
    with pytest.raises(EngineError, match="refusing to delete protected resource"):
        engine.update(lambda: None)
    assert hetzner.log == []
    # Unprotected by the program, the same update replaces it (the engine allows both at once).
    engine.update(web(protect=False, delete_before_replace=True), replace=[WEB])
    assert hetzner.log == ["delete server web (running)", "create server web"]


def test_a_protected_dependent_stops_a_delete_first_replacement() -> None:
    attachment = pulumi.ResourceOptions(protect=True)
    engine, hetzner = deployed(web(volume=attachment, delete_before_replace=True))
    with pytest.raises(EngineError, match="as part of replacing"):
        engine.update(web(volume=attachment, delete_before_replace=True), replace=[WEB])
    assert hetzner.log == []


def test_the_program_mocks_enforce_protect() -> None:
    """`mocks.ProviderMocks`, which the program's other tests run under, refuses too."""
    mocks = provider_mocks()
    run(mocks)
    mocks.force_replace = frozenset({"control-plane"})  # without raya's replace=
    with pytest.raises(ProtectedError, match="unable to replace resource control-plane"):
        run(mocks)
    mocks.force_replace = frozenset()
    with pytest.raises(ProtectedError, match="refusing to delete protected resource"):
        run_program(mocks, lambda: None)


def test_raya_shuts_a_replaced_server_down_itself_before_the_engine_deletes_it(
    cloud: Cloud,
) -> None:
    mark = len(cloud.hetzner.log)
    result = invoke(["up", "--replace", "agent-1", "--root", str(cloud.root)])
    assert result.exit_code == 0, result.output
    # raya's own shutdown through the API; the provider then finds it off and deletes it.
    assert cloud.hetzner.requests == ["shutdown raya-agent-1"]
    assert cloud.since(mark)[:2] == [
        "shutdown server raya-agent-1",
        "delete server raya-agent-1 (off)",
    ]


def test_a_server_that_does_not_shut_down_is_not_deleted(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hcloud provider would delete it running after about 31 s (hetzner.py); raya waits
    `SHUTDOWN_TIMEOUT` for it to be off and stops instead."""
    from raya.cloud import deploy

    monkeypatch.setattr(deploy, "SHUTDOWN_TIMEOUT", 0.5)
    monkeypatch.setattr(deploy, "SHUTDOWN_POLL", 0.05)
    hung = cloud.hetzner.server_named("raya-agent-1")
    assert hung is not None
    hung.acpi = False
    before, mark, calls = server_ids(cloud), len(cloud.hetzner.log), len(cloud.stack.calls)
    result = invoke(["up", "--replace", "agent-1", "--root", str(cloud.root)])
    assert result.exit_code == 1
    assert (
        "agent-1: server raya-agent-1 is still running 0.5 s after an ACPI shutdown, so it was "
        "not deleted (the hcloud provider would delete it running); nothing was deleted. See "
        "its console; to accept an ungraceful stop, power it off (`hcloud server poweroff "
        "raya-agent-1`) and run again"
    ) in " ".join(result.output.split())
    assert cloud.since(mark) == ["shutdown server raya-agent-1 (no effect)"]
    assert server_ids(cloud) == before
    assert "up" not in [action for action, _ in cloud.stack.calls[calls:]]  # Pulumi never ran
    # Off (powered off by hand), the next run replaces it.
    hung.status = "off"
    result = invoke(["up", "--replace", "agent-1", "--root", str(cloud.root)])
    assert result.exit_code == 0, result.output
    assert "delete server raya-agent-1 (off)" in cloud.since(mark)
