"""`raya roll` of three control planes against the Kubernetes API stand-in's etcd section
(`tests/operate/kube_api.py`, "etcd": k3s' `EtcdIsVoter` node condition written every 15 s by
the etcd leader, member names on the nodes, the API up while a majority of voters runs), over
real TLS, with one clock that moves when the roll sleeps. Replacing a control plane deletes
its server and creates it again on the pin; it boots in 100 s (not a multiple of the leader's
15 s: the node is Ready before its member is written a voter again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raya.operate import roll as rl
from tests.cloud.program.mocks import Run
from tests.operate import kube_api as ka
from tests.operate.test_roll import OLD, PIN, Clock, Replacer, roller

BOOT = 100.0

CONTROL_PLANES = {
    "control-plane": "10.0.1.10",
    "control-plane-1": "10.0.1.11",
    "control-plane-2": "10.0.1.12",
}
NODES = [*CONTROL_PLANES, "agent-0"]


@pytest.fixture
def cluster(clock: Clock) -> ka.Cluster:
    """Three control planes, each a voting etcd member since time 0, and an agent; an old k3s
    everywhere."""
    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in NODES}, clock=clock.now, boot=BOOT
    )
    ka.Etcd.of(state, CONTROL_PLANES)
    return state


@pytest.fixture
def api(deployed: Run, cluster: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(cluster, deployed.resources, tmp_path) as url:
        yield url


def etcd_roller(
    deployed: Run, url: str, replace: Replacer, clock: Clock, **kwargs: object
) -> rl.Roll:
    return roller(deployed, url, replace, clock, control_planes=list(CONTROL_PLANES), **kwargs)


def times(cluster: ka.Cluster, event: str) -> list[float]:
    return [t for t, text in cluster.events if text == event]


def member_names(cluster: ka.Cluster) -> dict[str, str]:
    return {
        name: cluster.nodes[name]["metadata"]["annotations"][ka.MEMBER_NAME]
        for name in CONTROL_PLANES
    }


def test_three_control_planes_go_one_at_a_time_each_back_as_a_new_node_and_voting_member(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    old = member_names(cluster)
    replace = Replacer(cluster)
    roll = etcd_roller(deployed, api, replace, clock)
    lines: list[str] = []
    roll.say = lines.append
    roll.run(rl.plan(NODES, [], NODES))
    assert [name for name, _, _ in replace.asked] == NODES
    replaced = {name: when for name, when, _ in replace.asked}
    new = member_names(cluster)
    for previous, name in zip(CONTROL_PLANES, [*list(CONTROL_PLANES)[1:], "agent-0"], strict=True):
        # Cordoned before its server went; its Node object deleted once the server was gone
        # (k3s removed its member then, a stopped one), before the new server registered,
        # 100 s later, a new Node with the new server's provider ID.
        assert f"{previous}: cordoned" in lines
        # k3s' member controller acts after the DELETE, not inside it: by raya's next look at
        # the API, 5 s on, the member is removed and the Node gone.
        (deleted,) = times(cluster, f"node {previous} deleted")
        assert replaced[previous] < deleted <= replaced[previous] + 5
        removed = f"etcd: {previous}'s member {old[previous]} removed"
        assert times(cluster, removed) == [deleted]
        registered = replaced[previous] + 100
        server = cluster.servers[previous]
        assert times(cluster, f"{previous}: new Node, hcloud://{server}") == [registered]
        # Back a learner under a new name, and the next replaced only once it voted.
        (learner,) = times(cluster, f"etcd: {previous} learner")
        (voter,) = [t for t in times(cluster, f"etcd: {previous} voter") if t > 0]
        assert registered < learner < voter <= replaced[name]
        assert new[previous] != old[previous]
        assert (
            f"{previous}: rejoined etcd as a new member ({old[previous]} -> {new[previous]}): "
            "its member was removed while its server was gone, so k3s set the datastore on its "
            "volume aside; it is a voter with the cluster's data from its peers"
        ) in lines
        # The API answered while it was gone: two of three voters were up.
        assert any(replaced[previous] < t < registered for t, _, _ in cluster.log)
    for name in CONTROL_PLANES:
        assert cluster.nodes[name]["status"]["nodeInfo"]["kubeletVersion"] == PIN
        assert cluster.nodes[name]["spec"]["providerID"] == f"hcloud://{cluster.servers[name]}"
    assert cluster.etcd is not None and cluster.etcd.split == set()


def stop(cluster: ka.Cluster, name: str, clock: Clock, seconds: float) -> None:
    """`name`'s server goes (a dead host), and `seconds` pass."""
    cluster.server_deleted(name)
    clock.t += seconds
    with cluster.lock:
        cluster.settle()


def test_a_roll_is_refused_while_another_control_plane_is_down(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # control-plane-2's host died a minute ago: its node is no longer Ready (40 s), and the
    # leader has marked its member Unhealthy (15 s ticks).
    stop(cluster, "control-plane-2", clock, 60)
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError) as caught:
        etcd_roller(deployed, api, replace, clock).run(
            rl.plan(NODES, ["control-plane-1", "agent-0"], [])
        )
    name = member_names_of(cluster, "control-plane-2")
    assert str(caught.value) == (
        f"control-plane-1: refused before any change: control-plane-2 is unhealthy, not Ready, "
        f"member {name}: failed to check etcd member status: context deadline exceeded; "
        "replacing control-plane-1 needs every other control plane Ready and a voting etcd "
        "member, or etcd could lose its quorum; left as it was; not touched: agent-0"
    )
    assert replace.asked == []
    assert [method for _, method, _ in cluster.log if method != "GET"] == []


def member_names_of(cluster: ka.Cluster, name: str) -> str:
    assert cluster.etcd is not None
    return cluster.etcd.members[name].name


def test_a_roll_is_refused_while_another_member_is_a_learner(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # control-plane-2 is Ready but its member not yet promoted: with two voters, replacing
    # one of them would leave one of two, no quorum.
    assert cluster.etcd is not None
    cluster.etcd.members["control-plane-2"].learner = True
    cluster.etcd.catch_up = 3600
    clock.t += 15
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError, match=(
        r"^control-plane-1: refused before any change: control-plane-2 is learner, Ready, "
        r"member control-plane-2-[0-9a-f]{8}: Node has not been promoted to voting member "
        r"of the etcd cluster; replacing control-plane-1 needs"
    )):  # fmt: skip
        etcd_roller(deployed, api, replace, clock).run(rl.plan(NODES, ["control-plane-1"], []))
    assert replace.asked == []


def test_a_roll_is_refused_while_another_control_plane_is_not_ready(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # control-plane-2's kubelet reports NotReady; its etcd member still votes. The roll
    # wants every other control plane Ready as well: a condition k3s' leader wrote can be
    # stale, and a control plane whose node is not Ready is not one to count on.
    conditions = cluster.nodes["control-plane-2"]["status"]["conditions"]
    conditions[0] = {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError, match=(
        r"^control-plane: refused before any change: control-plane-2 is voter, not Ready, "
        r"member control-plane-2-[0-9a-f]{8}; replacing control-plane needs every other"
    )):  # fmt: skip
        etcd_roller(deployed, api, replace, clock).run(rl.plan(NODES, ["control-plane"], []))
    assert replace.asked == []


def test_a_control_plane_that_stays_a_learner_stops_the_roll(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # Removed and joined again under a new name, it never catches up with the leader's log
    # (an hour here): the roll waits 600 s for a voter and goes no further.
    assert cluster.etcd is not None
    cluster.etcd.cloud_controller = True
    cluster.etcd.catch_up = 3600
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError) as caught:
        etcd_roller(deployed, api, replace, clock, ready_timeout=600).run(
            rl.plan(NODES, ["control-plane-1", "control-plane-2"], [])
        )
    new = member_names_of(cluster, "control-plane-1")
    assert str(caught.value) == (
        "control-plane-1: not back as a voting etcd member after 600 s (last seen: learner, "
        f"Ready, member {new}: Node has not been promoted to voting member of the etcd "
        "cluster); its server was replaced and the control plane is back, but not as a voting "
        "etcd member (no agent was touched): see `raya status`; not touched: control-plane-2"
    )
    assert [name for name, _, _ in replace.asked] == ["control-plane-1"]


def test_a_first_control_plane_without_the_guard_never_comes_back_here(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # A first control plane whose node lacks the datastore guard before each k3s start has
    # `cluster-init` and no `server:`: removed from etcd, it starts a cluster of its own on its
    # next start. The roll times out and goes no further.
    assert cluster.etcd is not None
    cluster.etcd.guard = False
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError, match=(
        r"^control-plane: not back from a new boot Ready on .* after 600 s \(last seen: "
        r"not registered\).*not touched: control-plane-1$"
    )):  # fmt: skip
        etcd_roller(deployed, api, replace, clock, ready_timeout=600).run(
            rl.plan(NODES, ["control-plane", "control-plane-1"], [])
        )
    assert [name for name, _, _ in replace.asked] == ["control-plane"]
    # Its node object went once its server was gone, and its member with it; the other two
    # kept the API up.
    member = "etcd: control-plane's member"
    (removed,) = [t for t, text in cluster.events if text.startswith(member)]
    assert replace.asked[0][1] < removed <= replace.asked[0][1] + 5  # the controller's, later
    assert "control-plane" not in cluster.nodes
    assert cluster.etcd.split == {"control-plane"}
    assert cluster.api_up()
