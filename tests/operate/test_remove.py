"""`raya up` removing nodes the inputs no longer declare, never by a bare delete: end to end
through the engine and Hetzner models (tests/cloud/program/engine.py, hetzner.py) running the
real program, against the Kubernetes API stand-in over real TLS (tests/operate/kube_api.py),
whose etcd section removes a member the way k3s' member controller does and refuses what
etcd refuses. Hetzner's deletions reach the stand-in's timeline (`events`), so one list shows
the order of drains, member removals, server deletions and node object deletions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raya.cloud.kubeconfig import api_client
from raya.defaults import WITHOUT_DRAIN
from raya.operate import remove as rm
from raya.operate import roll as rl
from tests.cloud.program import csi_topology as csi
from tests.cloud.program.engine import Cloud, deployed_cloud
from tests.cloud.program.test_program import PINS, provider_mocks
from tests.operate import kube_api as ka
from tests.operate.test_roll import Clock, local_path_volume, use_claim
from tests.operate.test_roll_locations import in_fsn1
from tests.runner import invoke

PIN = PINS.k3s.version
PLANES = ["control-plane", *(f"control-plane-{k}" for k in range(1, 5))]
POOL = {"name": "web", "type": "cx23", "count": 3, "addresses": "10.0.1.64/27"}


def settings(root: Path, **values: Any) -> None:
    path = root / "Pulumi.prod.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"].update({f"raya:{key}": value for key, value in values.items()})
    path.write_text(yaml.safe_dump(document))


def pool_count(root: Path, count: int) -> None:
    path = root / "deploy" / "fleet" / "agents.json"
    path.write_text(json.dumps({"agents": ["cx23"], "pools": [{**POOL, "count": count}]}))


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    """Five control planes, agent-0 and pool web of three, deployed."""
    settings(project, controlPlanes=5)
    pool_count(project, 3)
    example = provider_mocks()
    return deployed_cloud(project, monkeypatch, example.zones, example.snapshots)


@pytest.fixture
def cluster(cloud: Cloud, clock: Clock) -> ka.Cluster:
    """Every node registered, each control plane a running etcd member; web-2 runs a
    ReplicaSet's pod and a DaemonSet's; Hetzner's deletions reach the stand-in's machines."""
    state = ka.Cluster(clock=clock.now)
    for name in (*PLANES, "agent-0", "web-0", "web-1", "web-2"):
        state.nodes[name] = ka.node_object(name, PIN)
    ka.Etcd.of(state, {name: f"10.0.1.{10 + k}" for k, name in enumerate(PLANES)})
    state.pods = [
        ka.pod("shop-1", "default", "web-2"),
        ka.pod("flannel-x", "kube-system", "web-2", owner="DaemonSet"),
    ]

    def deleted(server_name: str) -> None:
        name = server_name.removeprefix("raya-")
        with state.lock:
            on_it = sorted(
                p["metadata"]["name"] for p in state.pods if p["spec"]["nodeName"] == name
            )
            node = state.nodes.get(name)
            cordoned = bool(node and node["spec"].get("unschedulable"))
            state.events.append((clock.now(), f"{name}: pods {on_it}, cordoned {cordoned}"))
            state.server_deleted(name)

    cloud.hetzner.on_delete = deleted
    return state


@pytest.fixture
def api(
    cloud: Cloud, cluster: ka.Cluster, tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    with ka.deployment_api(cluster, cloud.engine.resources, tmp_path) as url:
        monkeypatch.setattr(
            "raya.commands.deploy.kube_api_client", lambda text: api_client(text, server=url)
        )
        monkeypatch.setattr(rl, "Clock", lambda: clock)  # the stand-in's time
        # Commands on the nodes reach the stand-in's machines, as SSH reaches the servers.
        monkeypatch.setattr(
            "raya.commands.deploy.node_runner", lambda root, stack: ka.remote(cluster)
        )
        yield url


def up(cloud: Cloud, *flags: str) -> Any:
    return invoke(["up", "--root", str(cloud.root), *flags])


def failure(result: Any) -> str:
    """What `raya up` printed, its one-line error last."""
    assert result.exit_code == 1
    return str(result.output)


def timeline(cluster: ka.Cluster) -> list[str]:
    """What happened to leaving nodes and members, in order: members removed, servers
    deleted (and the node's state then), node objects deleted."""
    marks = ("'s member", "server deleted", "cordoned", "node ")
    return [text for _, text in cluster.events if any(mark in text for mark in marks)]


def members(cluster: ka.Cluster) -> dict[str, str]:
    """Each control plane's member name, by node."""
    assert cluster.etcd is not None
    return {node: member.name for node, member in cluster.etcd.members.items()}


def down(cluster: ka.Cluster, clock: Clock, *names: str) -> None:
    """The servers of `names` stop; 45 s later the etcd leader has marked their members
    Unhealthy (every 15 s) and the node controller their nodes not Ready (40 s)."""
    for name in names:
        cluster.machines[name] = ka.Machine(running=False)
    clock.t += 45
    with cluster.lock:
        cluster.settle()


def voters(cluster: ka.Cluster) -> list[tuple[int, int]]:
    """(voters running, voters) at each change since the start."""
    assert cluster.etcd is not None
    return [(running, total) for _, running, total in cluster.etcd.voters]


def settled(cluster: ka.Cluster, clock: Clock, seconds: float) -> None:
    """`seconds` pass and the controllers act (k3s' member controller on node deletions)."""
    clock.t += seconds
    with cluster.lock:
        cluster.settle()


def test_shrinking_drains_agents_and_removes_members_one_at_a_time_before_pulumi_deletes(
    cloud: Cloud, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    settings(cloud.root, controlPlanes=3)
    pool_count(cloud.root, 1)
    mark = len(cloud.hetzner.log)
    before = members(cluster)
    result = up(cloud)
    assert result.exit_code == 0, result.output
    m4, m3 = before["control-plane-4"], before["control-plane-3"]
    leaving = ["web-1", "web-2", "control-plane-3", "control-plane-4"]
    events = timeline(cluster)
    # The members removed one at a time, the highest first, both before the first server
    # went (the engine deletes the servers in an order of its own).
    assert events[:2] == [
        f"etcd: control-plane-4's member {m4} removed",
        f"etcd: control-plane-3's member {m3} removed",
    ]
    assert members(cluster) == {name: before[name] for name in PLANES[:3]}
    # Each leaving node cordoned and drained when its server was deleted (web-2's
    # ReplicaSet pod evicted and gone, the DaemonSet's left, as kubectl drain leaves it)...
    assert sorted(events[2:10]) == sorted(
        [
            "web-1: pods [], cordoned True",
            "web-1: server deleted",
            "web-2: pods ['flannel-x'], cordoned True",
            "web-2: server deleted",
            "control-plane-3: pods [], cordoned True",
            "control-plane-3: server deleted",
            "control-plane-4: pods [], cordoned True",
            "control-plane-4: server deleted",
        ]
    )
    every = [text for _, text in cluster.events]
    assert every.index("pod default/shop-1 gone") < every.index(events[0])
    # Each leaving control plane's k3s disabled before its member was removed, stopped after;
    # neither started again. etcd had five voters, all running, then four, then three.
    for name in ("control-plane-4", "control-plane-3"):
        disabled = every.index(f"{name}: ran {' '.join(rm.DISARM)}")
        removed = every.index(f"etcd: {name}'s member {before[name]} removed")
        assert disabled < removed < every.index(f"{name}: ran systemctl stop k3s.service")
    assert not [text for text in every if "started again" in text]
    assert voters(cluster) == [(5, 5), (4, 4), (3, 3)]
    # ...and its node object deleted once every server was gone: agents at once, control
    # planes once k3s' member controller let them go (its finalizer).
    settled(cluster, clock, ka.MEMBER_SYNC)
    assert timeline(cluster)[10:] == [f"node {name} deleted" for name in leaving]
    # Hetzner's side: each server stopped then deleted, the leaving control planes' volumes
    # (their removed members' data) deleted once detached; nothing else.
    hetzner = cloud.since(mark)
    for name in leaving:
        assert hetzner.index(f"shutdown server raya-{name}") + 1 <= hetzner.index(
            f"delete server raya-{name} (off)"
        )
    assert sorted(hetzner) == sorted(
        [
            *(f"shutdown server raya-{name}" for name in leaving),
            *(f"delete server raya-{name} (off)" for name in leaving),
            *(f"detach volume raya-{n}-state (server deleted)" for n in leaving[2:]),
            *(f"delete volume raya-{n}-state" for n in leaving[2:]),
        ]
    )
    assert "etcd members of control-plane-4" not in result.output  # `up` acts, `preview` tells


def test_shrinking_5_to_3_to_1_keeps_a_quorum_at_every_step(
    cloud: Cloud, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    before = members(cluster)
    settings(cloud.root, controlPlanes=3)
    assert up(cloud).exit_code == 0
    settings(cloud.root, controlPlanes=1)
    mark = len(cloud.hetzner.log)
    result = up(cloud)
    assert result.exit_code == 0, result.output
    # Every control plane but the first removed, the highest first; each removed while its
    # k3s still ran (two running of two can let one go, one running of two could not), and
    # none came back: five voters, then four, three, two, one; every one of them running.
    removed = [text for text in timeline(cluster) if "'s member" in text]
    assert removed == [
        f"etcd: {name}'s member {before[name]} removed" for name in reversed(PLANES[1:])
    ]
    assert voters(cluster) == [(5, 5), (4, 4), (3, 3), (2, 2), (1, 1)]
    assert members(cluster) == {"control-plane": before["control-plane"]}
    assert "etcd: control-plane-2, control-plane-1 still removed 30 s after" in result.output
    assert "delete server raya-control-plane-1 (off)" in cloud.since(mark)
    assert cluster.api_up()


def test_a_removed_member_that_comes_back_stops_the_shrink_before_any_server_goes(
    cloud: Cloud, cluster: ka.Cluster, api: str, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 5 -> 3 where systemctl does nothing to control-plane-3's k3s (say, a node where it
    # runs under another unit's name): removed, its k3s starts again (Restart=always) and
    # joins etcd as a learner under a new name, within raya's watch after the last removal.
    node = ka.remote(cluster)

    def remote(name: str, command: list[str]) -> tuple[int, str]:
        return (0, "") if name == "control-plane-3" else node(name, command)

    monkeypatch.setattr("raya.commands.deploy.node_runner", lambda root, stack: remote)
    settings(cloud.root, controlPlanes=3)
    mark = len(cloud.hetzner.log)
    text = failure(up(cloud))
    assert cluster.etcd is not None
    back = cluster.etcd.members["control-plane-3"]
    assert back.learner
    # (The node's EtcdIsVoter condition may still be the old member's until the leader's
    # next tick: the new member's name is what tells.)
    assert "control-plane-3: its etcd member is back (" in text
    assert f"Ready, member {back.name}" in text
    assert "k3s on it started again and joined through its `server:`" in text
    assert "no server was deleted" in text
    assert cloud.since(mark) == []
    assert cloud.stack.calls[-1][0] != "up"  # Pulumi's update never ran
    # The quorum held throughout: four voters after the removals, the learner not one yet.
    assert voters(cluster) == [(5, 5), (4, 4), (3, 3)]


def test_a_shrink_that_would_lose_quorum_is_refused_before_anything_changes(
    cloud: Cloud, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # Five members, two of those that stay down: removing control-plane-4 (healthy) would
    # leave two healthy of four, where a quorum of four members is three.
    down(cluster, clock, "control-plane-1", "control-plane-2")
    settings(cloud.root, controlPlanes=3)
    mark = len(cloud.hetzner.log)
    text = failure(up(cloud))
    assert "shrinking refused, nothing changed" in text
    assert "after removing control-plane-4: 2 healthy of 4 members, 3 needed" in text
    assert "not healthy: control-plane-1 (unhealthy, not Ready, member " in text
    assert "control-plane-2 (unhealthy, not Ready, member " in text
    assert cloud.since(mark) == []
    assert [path for _, method, path in cluster.log if method != "GET"] == []
    assert len(members(cluster)) == 5


def test_an_unhealthy_leaving_member_goes_first_and_the_shrink_keeps_quorum(
    cloud: Cloud, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # control-plane-3 down: removing it first leaves four members, four healthy; then
    # control-plane-4 leaves three of three.
    down(cluster, clock, "control-plane-3")
    before = members(cluster)
    settings(cloud.root, controlPlanes=3)
    result = up(cloud)
    assert result.exit_code == 0, result.output
    removed = [text for text in timeline(cluster) if "'s member" in text]
    assert removed == [
        f"etcd: control-plane-3's member {before['control-plane-3']} removed",
        f"etcd: control-plane-4's member {before['control-plane-4']} removed",
    ]


def test_a_drain_that_fails_stops_the_update_before_pulumi(
    cloud: Cloud, cluster: ka.Cluster, api: str
) -> None:
    # A budget that allows no disruption of shop: its pod on web-2 cannot be evicted.
    cluster.budgets = [ka.budget("shop", "default", "shop", minAvailable=1)]
    settings(cloud.root, controlPlanes=3)
    pool_count(cloud.root, 1)
    mark = len(cloud.hetzner.log)
    text = failure(up(cloud))
    assert "web-2: drain timed out after 600 s" in text
    assert "refused by a PodDisruptionBudget: default/shop-1" in text
    assert "no server was deleted" in text
    assert cloud.since(mark) == []
    assert len(members(cluster)) == 5  # the members stay: drains come first
    assert cloud.stack.calls[-1][0] == "export"  # Pulumi's update never ran


def test_a_leaving_node_with_a_local_path_claim_stops_the_update_unless_accepted(
    cloud: Cloud, cluster: ka.Cluster, api: str
) -> None:
    # shop-1 on web-2 keeps its data in a local-path claim, on web-2's own disk.
    use_claim(cluster, "shop-1", "cart", local_path_volume("pvc-9f8e", "web-2"))
    pool_count(cloud.root, 2)
    mark = len(cloud.hetzner.log)
    text = failure(up(cloud))
    assert "web-2: local-path claims on this node's disk would be lost with its server: " in text
    assert "default/cart (pod shop-1)" in text and "--accept-local-data-loss" in text
    assert cloud.since(mark) == []  # checked before anything changes: no server touched
    assert not cluster.nodes["web-2"]["spec"].get("unschedulable")  # not even cordoned
    accepted = up(cloud, "--accept-local-data-loss")
    assert accepted.exit_code == 0, accepted.output
    assert "delete server raya-web-2 (off)" in cloud.since(mark)


def in_locations(cluster: ka.Cluster) -> None:
    """The pool's nodes in fsn1, the others in nbg1, as the CSI driver labels them; shop-1 on
    web-2 keeps its data on a Hetzner Volume in fsn1."""
    for name, node in cluster.nodes.items():
        location = "fsn1" if name.startswith("web-") else "nbg1"
        node["metadata"]["labels"].update(csi.published_labels(location))
    use_claim(cluster, "shop-1", "cart", in_fsn1("pvc-5c1d"))


def test_removing_the_last_nodes_of_a_volumes_location_stops_the_update_unless_accepted(
    cloud: Cloud, cluster: ka.Cluster, api: str
) -> None:
    in_locations(cluster)
    (cloud.root / "deploy" / "fleet" / "agents.json").write_text('{"agents": ["cx23"]}')
    mark = len(cloud.hetzner.log)
    text = failure(up(cloud))
    assert (
        "web-2: pods on Hetzner Volumes would have no node to go to once the leaving nodes are "
        "gone (none staying where their volume is, Ready and schedulable): default/cart (pod "
        "shop-1; pinned to csi.hetzner.cloud/location in fsn1)"
    ) in " ".join(text.split())
    assert cloud.since(mark) == []  # checked before anything changes: no server touched
    assert not cluster.nodes["web-2"]["spec"].get("unschedulable")  # not even cordoned
    accepted = up(cloud, "--accept-volume-downtime")
    assert accepted.exit_code == 0, accepted.output
    assert "delete server raya-web-2 (off)" in cloud.since(mark)
    # Its ReplicaSet's new pod waits: no node left where the volume is.
    (shop,) = [p for p in cluster.pods if p["metadata"]["name"].startswith("shop-")]
    assert shop["spec"]["nodeName"] == ""


def test_a_node_leaving_its_location_to_others_takes_no_flag(
    cloud: Cloud, cluster: ka.Cluster, api: str
) -> None:
    in_locations(cluster)
    pool_count(cloud.root, 2)  # web-2 leaves; web-0 and web-1 stay in fsn1
    result = up(cloud)
    assert result.exit_code == 0, result.output
    (shop,) = [p for p in cluster.pods if p["metadata"]["name"].startswith("shop-")]
    assert shop["spec"]["nodeName"] == "web-0"  # not agent-0 nor a control plane: nbg1


def test_an_unreachable_api_refuses_unless_asked_to_delete_undrained(
    cloud: Cloud, cluster: ka.Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens there: the API cannot be reached.
    monkeypatch.setattr(
        "raya.commands.deploy.kube_api_client",
        lambda text: api_client(text, server="https://127.0.0.1:9"),
    )
    pool_count(cloud.root, 2)
    mark = len(cloud.hetzner.log)
    refused = failure(up(cloud))
    assert "cannot reach the Kubernetes API" in refused
    assert f"pass {WITHOUT_DRAIN}" in refused
    assert cloud.since(mark) == []
    forced = up(cloud, WITHOUT_DRAIN)
    assert forced.exit_code == 0, forced.output
    assert "delete server raya-web-2 (off)" in cloud.since(mark)
    assert "deleting web-2 undrained" in forced.output


def test_a_leaving_control_plane_without_a_node_object_needs_the_flag(
    cloud: Cloud, cluster: ka.Cluster, api: str
) -> None:
    del cluster.nodes["control-plane-4"]  # never registered, or deleted by hand
    settings(cloud.root, controlPlanes=3)
    mark = len(cloud.hetzner.log)
    refused = failure(up(cloud))
    assert "control-plane-4: no node object, so raya cannot remove its etcd member" in refused
    assert cloud.since(mark) == [] and len(members(cluster)) == 5
    m3 = members(cluster)["control-plane-3"]
    forced = up(cloud, WITHOUT_DRAIN)
    assert forced.exit_code == 0, forced.output
    removed = [text for text in timeline(cluster) if "'s member" in text]
    assert removed == [f"etcd: control-plane-3's member {m3} removed"]
    assert "delete server raya-control-plane-4 (off)" in cloud.since(mark)


def test_quorum_arithmetic() -> None:
    healthy = dict.fromkeys(PLANES, "")
    # 5 -> 3, all healthy: fine at every step.
    assert rm.quorum_problem(healthy, ["control-plane-4", "control-plane-3"]) is None
    # 3 -> 1 with control-plane (which stays) down: one member left, none healthy.
    three = {"control-plane": "not Ready", "control-plane-1": "", "control-plane-2": ""}
    problem = rm.quorum_problem(three, ["control-plane-2", "control-plane-1"])
    assert problem is not None and "after removing control-plane-2" in problem
    assert "not healthy: control-plane (not Ready)" in problem
    # Unhealthy leaving members go first, then the highest numbers.
    order = rm.removal_order(
        ["control-plane-3", "control-plane-4", "control-plane-2"],
        {"control-plane-2": "", "control-plane-3": "", "control-plane-4": "", "x": ""}
        | {"control-plane-3": "not Ready"},
    )
    assert order == ["control-plane-3", "control-plane-4", "control-plane-2"]


def test_the_standin_removes_members_as_k3s_and_etcd_do() -> None:
    clock = Clock()
    state = ka.Cluster(clock=clock.now)
    for name in PLANES[:3]:
        state.nodes[name] = ka.node_object(name, PIN)
    ka.Etcd.of(state, {name: f"10.0.1.{10 + k}" for k, name in enumerate(PLANES[:3])})
    before = members(state)
    state.machines["control-plane-1"] = ka.Machine(running=False)
    # Two of three members run: removing a running one would leave one running of two,
    # below the quorum of two. etcd refuses; the node stays, held by the finalizer.
    status, node = ka.delete_node(state, "control-plane-2")
    assert status == 200 and node["metadata"]["deletionTimestamp"]
    settled(state, clock, ka.MEMBER_SYNC)
    assert "control-plane-2" in state.nodes and len(members(state)) == 3
    # The member that is down may go at any time, through the annotation too, once k3s'
    # controller gets to it: not inside the request, MEMBER_SYNC later.
    ka.merge_metadata(state.nodes["control-plane-1"], {"annotations": {rm.REMOVE: "true"}})
    state.etcd.changed["control-plane-1"] = clock.t  # type: ignore[union-attr]
    settled(state, clock, ka.MEMBER_SYNC / 2)
    assert len(members(state)) == 3
    settled(state, clock, ka.MEMBER_SYNC / 2)
    notes = state.nodes["control-plane-1"]["metadata"]["annotations"]
    assert notes == {rm.REMOVE: "true", rm.REMOVED: before["control-plane-1"]}
    # The finalizer's retry of control-plane-2 then succeeds: one running of one is a quorum.
    assert members(state) == {"control-plane": before["control-plane"]}
    assert "control-plane-2" not in state.nodes
    # Its node object then goes: k3s' onRemove finds the member already removed.
    ka.delete_node(state, "control-plane-1")
    assert "control-plane-1" in state.nodes  # answered; the finalizer still holds it
    settled(state, clock, ka.MEMBER_SYNC)
    assert "control-plane-1" not in state.nodes and len(members(state)) == 1


def test_a_removed_member_whose_k3s_restarts_joins_again_as_a_learner_then_a_voter() -> None:
    clock = Clock()
    state = ka.Cluster(clock=clock.now)
    for name in PLANES[:3]:
        state.nodes[name] = ka.node_object(name, PIN)
    etcd = ka.Etcd.of(state, {name: f"10.0.1.{10 + k}" for k, name in enumerate(PLANES[:3])})
    old = members(state)["control-plane-2"]
    ka.merge_metadata(state.nodes["control-plane-2"], {"annotations": {rm.REMOVE: "true"}})
    etcd.changed["control-plane-2"] = clock.t
    settled(state, clock, ka.MEMBER_SYNC)
    assert "control-plane-2" not in etcd.members
    # Its k3s exits (tombstone) and, with Restart=always, starts again K3S_RESTART later: a
    # learner under a new name, which the member controller sees as a member again.
    settled(state, clock, ka.K3S_RESTART)
    new = etcd.members["control-plane-2"]
    assert new.learner and new.name != old
    settled(state, clock, ka.MEMBER_SYNC)
    notes = state.nodes["control-plane-2"]["metadata"]["annotations"]
    assert notes[ka.MEMBER_NAME] == new.name and rm.REMOVED not in notes
    assert notes[rm.REMOVE] == "false"
    # Promoted once caught up (20 s), as the leader's 15 s ticks find it.
    settled(state, clock, 45)
    assert not etcd.members["control-plane-2"].learner
    assert voters(state) == [(3, 3), (2, 2), (3, 3)]
    # Disabled (Restart=no) before its removal, k3s stays down.
    ka.remote(state)(
        "control-plane-1", ["sh", "-c", "... Restart=no ... && systemctl disable k3s.service"]
    )
    ka.merge_metadata(state.nodes["control-plane-1"], {"annotations": {rm.REMOVE: "true"}})
    etcd.changed["control-plane-1"] = clock.t
    settled(state, clock, ka.MEMBER_SYNC)
    settled(state, clock, 600)
    assert "control-plane-1" not in etcd.members


def test_preview_says_what_up_does_to_leaving_control_planes() -> None:
    from raya.commands.deploy import leaving_plan

    assert leaving_plan(("web-2", "control-plane-3", "control-plane-4")) == (
        "nodes leaving (1 agent(s), 2 control plane(s)): cordon and drain web-2, "
        "control-plane-3, control-plane-4; remove the etcd members of control-plane-3, "
        "control-plane-4 one at a time (k3s disabled over SSH first, stopped once its member "
        "is gone); watch 30 s that no removed member comes back; delete their servers and "
        "volumes, then their node objects"
    )


def test_k3s_removes_a_member_after_the_request_not_inside_it(
    cloud: Cloud, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    """Through the API over TLS, as raya asks: the PATCH is answered with the member still
    there; k3s' member controller acts MEMBER_SYNC later, at the next look."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(api_client(cloud.stack.outputs()["kubeconfig"].value, server=api))

    def notes(node: Any) -> dict[str, str]:
        return dict(node.metadata.annotations or {})

    before = members(cluster)["control-plane-4"]
    patch = {"metadata": {"annotations": {rm.REMOVE: "true"}}}
    assert rm.REMOVED not in notes(core.patch_node("control-plane-4", patch))
    assert rm.REMOVED not in notes(core.read_node("control-plane-4"))
    clock.t += ka.MEMBER_SYNC
    assert notes(core.read_node("control-plane-4"))[rm.REMOVED] == before
    assert "control-plane-4" not in members(cluster)


def test_commands_reach_the_node_quoted_for_its_shell_over_the_pinned_ssh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ssh hands the remote shell one line: what raya runs there splits back into sudo and the
    command, and goes to the node's own entry of the stack outputs (its pinned host key)."""
    import shlex

    from raya.commands import access, backups
    from raya.commands import deploy as deploy_command
    from raya.operate import ssh

    entry = {"dnsName": "cp3.raya.example.com.", "ipv4": "203.0.113.7",
             "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample"}  # fmt: skip
    reads: list[str] = []

    def outputs(command: str, stack: str, root: Path | None) -> dict[str, Any]:
        reads.append(stack)
        return {"servers": {"control-plane-3": entry}}

    sent: list[list[str]] = []

    def remote(found: Any, command: list[str], stdin: Any) -> tuple[int, str]:
        assert found is entry
        argv = ssh.ssh_command(found, Path("/k"), ["sudo", *command])
        sent.append(argv[argv.index("--") + 1 :])
        return 0, ""

    monkeypatch.setattr(access, "stack_outputs", outputs)
    monkeypatch.setattr(backups, "remote", remote)
    run = deploy_command.node_runner(Path("/p"), "prod")
    assert run("control-plane-3", rm.DISARM) == (0, "")
    assert run("control-plane-3", rm.STOP) == (0, "")
    assert [shlex.split(" ".join(argv)) for argv in sent] == [
        ["sudo", *rm.DISARM],
        ["sudo", *rm.STOP],
    ]
    assert reads == ["prod"]  # the outputs read once
    code, text = run("control-plane-9", rm.STOP)
    assert code == 255 and text == "no server control-plane-9 in the outputs of stack prod"


def test_a_member_k3s_does_not_remove_stops_the_shrink_and_says_k3s_is_disabled(
    cloud: Cloud, cluster: ka.Cluster, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # k3s' member controller never gets to it (say, its leader stuck): raya waits 120 s.
    monkeypatch.setattr(ka, "MEMBER_SYNC", 10_000.0)
    settings(cloud.root, controlPlanes=3)
    mark = len(cloud.hetzner.log)
    text = " ".join(failure(up(cloud)).split())
    assert (
        "control-plane-4: k3s did not remove its etcd member within 120 s (annotation "
        f"{rm.REMOVE}=true set, no {rm.REMOVED} yet)"
    ) in text
    assert (
        "k3s there still runs but is disabled: to keep it, `systemctl enable k3s.service` and "
        f"delete {rm.LEAVING_DROPIN}; no server was deleted"
    ) in text
    assert cloud.since(mark) == []
    assert len(members(cluster)) == 5 and cluster.api_up()


def test_a_healthy_leaving_control_plane_out_of_ssh_reach_keeps_its_member(
    cloud: Cloud, cluster: ka.Cluster, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # control-plane-4 runs and votes, but SSH does not reach it: removed now, its k3s would
    # start again and join etcd. raya refuses, its member in place, nothing deleted.
    def remote(name: str, command: list[str]) -> tuple[int, str]:
        return 255, "ssh: connect to host 203.0.113.9 port 22: Connection timed out"

    monkeypatch.setattr("raya.commands.deploy.node_runner", lambda root, stack: remote)
    settings(cloud.root, controlPlanes=3)
    mark = len(cloud.hetzner.log)
    text = " ".join(failure(up(cloud)).split())
    assert (
        "control-plane-4: could not disable k3s over SSH (ssh: connect to host 203.0.113.9 "
        "port 22: Connection timed out); its member is left as it is"
    ) in text
    assert cloud.since(mark) == []
    assert len(members(cluster)) == 5
    assert rm.REMOVE not in cluster.nodes["control-plane-4"]["metadata"]["annotations"]
