"""`raya roll` end to end through the engine model and the Hetzner model
(tests/cloud/program/engine.py, hetzner.py): the real program, replaced as the engine plans it,
against the Kubernetes API stand-in (tests/operate/kube_api.py) over real TLS, where a deleted
server's node goes away and a node registers again, with a new boot, only when Hetzner has
created its server again; one clock, read by the roll and the stand-in, moves when the roll
sleeps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raya.cloud.kubeconfig import api_client
from raya.operate import roll as rl
from tests.cloud import hetzner_api as standin
from tests.cloud.program.engine import Cloud, deployed_cloud
from tests.cloud.program.test_program import PINS, provider_mocks
from tests.operate import kube_api as ka
from tests.operate.test_roll import BOOT, Clock
from tests.runner import invoke

OLD = "v1.30.0+k3s1"
NODES = ["control-plane", "agent-0", "agent-1", "agent-2"]


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    example = provider_mocks()
    return deployed_cloud(project, monkeypatch, example.zones, example.snapshots)


@pytest.fixture
def created() -> list[tuple[str, bool, list[str]]]:
    """Each node whose server Hetzner created: whether its Node object was still there, its
    pods then."""
    return []


@pytest.fixture
def cluster(
    cloud: Cloud, created: list[tuple[str, bool, list[str]]], clock: Clock
) -> ka.Cluster:
    """The nodes on an old k3s, agent-0 running a ReplicaSet's pod and a DaemonSet's; Hetzner's
    deletions and creations reach the stand-in's machines."""
    def server_id(name: str) -> int:
        server = cloud.hetzner.server_named(f"raya-{name}")
        assert server is not None
        return server.id

    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD, server=server_id(name)) for name in NODES},
        clock=clock.now,
        boot=BOOT,
    )
    state.pods = [
        ka.pod("web-1", "default", "agent-0"),
        ka.pod("flannel-x", "kube-system", "agent-0", owner="DaemonSet"),
    ]

    def deleted(server_name: str) -> None:
        state.server_deleted(server_name.removeprefix("raya-"))

    def boots(server_name: str) -> None:
        name = server_name.removeprefix("raya-")
        with state.lock:
            state.settle()
            pods = sorted(
                p["metadata"]["name"] for p in state.pods if p["spec"]["nodeName"] == name
            )
            created.append((name, name in state.nodes, pods))
            state.server_created(name, PINS.k3s.version, server=server_id(name))

    cloud.hetzner.on_delete = deleted
    cloud.hetzner.on_create = boots
    return state


@pytest.fixture
def api(cloud: Cloud, cluster: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(cluster, cloud.engine.resources, tmp_path) as url:
        yield url


def through_the_stand_in(api: str, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """`raya roll` talks to the Kubernetes stand-in at `api` and keeps its time."""
    monkeypatch.setattr(
        "raya.commands.operate.kube_api_client", lambda text: api_client(text, server=api)
    )
    monkeypatch.setattr(rl, "Clock", lambda: clock)


def test_roll_of_the_control_plane_and_an_agent_deletes_each_old_server_first(
    cloud: Cloud,
    cluster: ka.Cluster,
    created: list[tuple[str, bool, list[str]]],
    api: str,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    through_the_stand_in(api, clock, monkeypatch)
    (volume,) = cloud.hetzner.volumes.values()
    mark = len(cloud.hetzner.log)
    roll = ["roll", "control-plane", "agent-0", "--root", str(cloud.root)]
    result = invoke(roll)
    assert result.exit_code == 0, result.output
    # The control plane first, then the agent; each old server stopped and deleted before
    # the new one is created, the volume detached by the deletion and attached to the new one.
    assert cloud.since(mark) == [
        "shutdown server raya-control-plane",
        "detach volume raya-control-plane-state (server deleted)",
        "delete server raya-control-plane (off)",
        "create server raya-control-plane",
        "attach volume raya-control-plane-state to raya-control-plane",
        "shutdown server raya-agent-0",
        "delete server raya-agent-0 (off)",
        "create server raya-agent-0",
    ]
    new = cloud.hetzner.server_named("raya-control-plane")
    assert new is not None and volume.server == new.id
    # Each server was created with its old Node object gone, so its kubelet registers a new
    # one; agent-0's once its pods were gone (its DaemonSet pod stays, as with kubectl drain).
    assert created == [
        ("control-plane", False, []),
        ("agent-0", False, ["flannel-x"]),
    ]
    # Each came back from a new boot of its new server, 90 s after it was created.
    for name in ("control-plane", "agent-0"):
        boot = cluster.nodes[name]["status"]["nodeInfo"]["bootID"]
        registered = [t for t, text in cluster.events if text == f"{name}: registered, boot {boot}"]
        (server_created,) = [t for t, text in cluster.events if text == f"{name}: server created"]
        assert registered == [server_created + 90]
    assert cluster.nodes["agent-0"]["spec"]["unschedulable"] is False
    # Each new Node names its new server, as Hetzner numbered it.
    for name in ("control-plane", "agent-0"):
        server = cloud.hetzner.server_named(f"raya-{name}")
        assert server is not None
        assert cluster.nodes[name]["spec"]["providerID"] == f"hcloud://{server.id}"
    assert "rolled 2 node(s)" in result.stdout


def test_a_batch_is_one_targeted_engine_run_over_its_servers_and_their_dependents(
    cloud: Cloud,
    cluster: ka.Cluster,
    created: list[tuple[str, bool, list[str]]],
    api: str,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    through_the_stand_in(api, clock, monkeypatch)
    # A change elsewhere in the inputs, waiting for the next `raya up`: the SSH sources, which
    # the firewall takes. A targeted run leaves it (its provider is not even asked).
    stack_file = cloud.root / "Pulumi.prod.yaml"
    stack_file.write_text(stack_file.read_text() + "  raya:sshSources:\n    - 198.51.100.0/24\n")
    firewall_before = cloud.engine.snapshot[cloud.engine.goals["firewall"].urn].inputs
    mark = len(cloud.hetzner.log)
    asked = len(standin.BUDGET.requests)
    old_ids = [server.id for n in ("agent-0", "agent-1", "agent-2")
               if (server := cloud.hetzner.server_named(f"raya-{n}")) is not None]  # fmt: skip
    agents = ["agent-0", "agent-1", "agent-2"]
    result = invoke(["roll", *agents, "--max-unavailable", "2", "--root", str(cloud.root)])
    assert result.exit_code == 0, result.output
    urn = "urn:pulumi:prod::raya::hcloud:index/server:Server::"
    # Two engine runs, each replacing and targeting its batch's servers.
    ups = [(call, target) for call, target in zip(
        [c for c in cloud.stack.calls if c[0] == "up"][1:], cloud.stack.targets[1:], strict=True
    )]  # fmt: skip
    assert ups == [
        (("up", (urn + "agent-0", urn + "agent-1")), (urn + "agent-0", urn + "agent-1")),
        (("up", (urn + "agent-2",)), (urn + "agent-2",)),
    ]
    # The last run's steps: its server replaced, its DNS record (a dependent: the server's
    # address) updated; every other resource the same, the firewall with its old inputs.
    changed = sorted((op, name) for op, name in cloud.engine.steps if op != "same")
    assert changed == [
        ("create-replacement", "agent-2"),
        ("delete-replaced", "agent-2"),
        ("update", "a2"),
    ]
    assert cloud.engine.snapshot[cloud.engine.goals["firewall"].urn].inputs == firewall_before
    # Hetzner: the first batch's two servers shut down, then each deleted and created again.
    assert cloud.since(mark)[:2] == [
        "shutdown server raya-agent-0",
        "shutdown server raya-agent-1",
    ]
    assert sorted(cloud.since(mark)[2:6]) == [
        "create server raya-agent-0",
        "create server raya-agent-1",
        "delete server raya-agent-0 (off)",
        "delete server raya-agent-1 (off)",
    ]
    assert [name for name, _, _ in created] == agents
    assert "rolled 3 node(s)" in result.stdout
    # raya's own requests to Hetzner's API: the server types once for the roll and once per
    # engine run (the fleet's two types, cx23 and cx33, one request each) with one list of the
    # cluster autoscaler's servers (none left without a pool: `check_no_orphans`); per batch
    # one list of the cluster's servers, one shutdown per server, one list per look until all
    # are off (here at the first): not one request per server per look.
    one, two = (cloud.hetzner.server_named(f"raya-{n}") for n in ("agent-0", "agent-1"))
    three = cloud.hetzner.server_named("raya-agent-2")
    types = ["GET /v1/server_types"] * 2
    assert standin.BUDGET.requests[asked:] == [
        *types,
        *types, "GET /v1/servers", "GET /v1/servers",
        f"POST /v1/servers/{old_ids[0]}/actions/shutdown",
        f"POST /v1/servers/{old_ids[1]}/actions/shutdown", "GET /v1/servers",
        *types, "GET /v1/servers", "GET /v1/servers",
        f"POST /v1/servers/{old_ids[2]}/actions/shutdown", "GET /v1/servers",
    ]  # fmt: skip
    assert None not in (one, two, three) and standin.BUDGET.refused == 0
    # The next untargeted update applies the waiting change (the firewall model replaces it).
    cloud.up()
    assert [op for op, name in cloud.engine.steps if name == "firewall"] == [
        "delete-replaced", "create-replacement",
    ]  # fmt: skip
