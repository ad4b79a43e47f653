"""A replacement that leaves Kubernetes, Hetzner's cloud controller and its CSI driver
consistent (issue 33), under the Kubernetes stand-in's rules for them (`tests/operate/
kube_api.py`: provider IDs immutable once set, a kubelet keeping the Node it finds, the cloud
controller deleting the Node of a gone server and syncing load balancer targets by provider
ID, VolumeAttachments the CSI driver never re-reads), over real TLS, one clock for the roll
and the stand-in. First the rules themselves, then rolls that keep them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from kubernetes.client import ApiException

from raya.cloud.kubeconfig import api_client
from raya.operate import roll as rl
from tests.cloud.program.mocks import Run
from tests.operate import kube_api as ka
from tests.operate.test_roll import (
    BOOT,
    OLD,
    PIN,
    Clock,
    Replacer,
    command_replacer,
    hetzner_volume,
    roller,
    use_claim,
    when,
)
from tests.runner import invoke

NODES = ["control-plane", "agent-0", "agent-1"]
PV = "pvc-9f8e"


@pytest.fixture
def cluster(clock: Clock) -> ka.Cluster:
    """One control plane (a sole etcd member) and two agents on an old k3s; Hetzner's cloud
    controller runs, with a LoadBalancer Service; a StatefulSet's pod on agent-0 uses a claim
    on a Hetzner Volume."""
    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in NODES},
        clock=clock.now,
        boot=BOOT,
        cloud_controller=True,
        load_balancers=["default/hello"],
    )
    ka.Etcd.of(state, {"control-plane": "10.0.1.10"})
    state.pods = [
        ka.pod("db-0", "data", "agent-0", owner="StatefulSet", grace=30),
        ka.pod("web-1", "default", "agent-1"),
    ]
    use_claim(state, "db-0", "pgdata", hetzner_volume(PV))
    with state.lock:
        state.settle()  # the volume attached to agent-0's server, as it runs
    return state


@pytest.fixture
def api(deployed: Run, cluster: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(cluster, deployed.resources, tmp_path) as url:
        yield url


def attachments(cluster: ka.Cluster) -> list[tuple[str, str, bool]]:
    """(volume, node, attached) of each VolumeAttachment."""
    found = []
    for attachment in cluster.attachments.values():
        spec, attached = attachment["spec"], attachment["status"]["attached"]
        found.append((spec["source"]["persistentVolumeName"], spec["nodeName"], attached))
    return sorted(found)


def settle_after(cluster: ka.Cluster, clock: Clock, seconds: float) -> None:
    clock.t += seconds
    with cluster.lock:
        cluster.settle()


# ---- the rules of the stand-in ----


def test_a_provider_id_set_cannot_change(deployed: Run, cluster: ka.Cluster, api: str) -> None:
    core = rl.Kubernetes(api_client(deployed.outputs["kubeconfig"], server=api)).core
    with pytest.raises(ApiException) as caught:
        core.patch_node("agent-0", {"spec": {"providerID": "hcloud://1"}})
    assert caught.value.status == 422
    assert "may not change providerID" in str(caught.value.body)
    cluster.nodes["agent-1"]["spec"]["providerID"] = ""
    core.patch_node("agent-1", {"spec": {"providerID": "hcloud://2"}})  # from "": allowed
    assert cluster.nodes["agent-1"]["spec"]["providerID"] == "hcloud://2"


def test_a_recreated_server_keeps_the_old_node_and_the_load_balancer_fails(
    cluster: ka.Cluster, clock: Clock
) -> None:
    # agent-0's server replaced behind Kubernetes' back, its new kubelet up within 30 s: the
    # cloud controller (NotReady only after 40 s) has not deleted the Node, the kubelet keeps
    # it, with the old server's provider ID.
    cluster.boot = 30
    old_server = cluster.servers["agent-0"]
    cluster.server_deleted("agent-0")
    cluster.server_created("agent-0", PIN)
    settle_after(cluster, clock, 30)
    node = cluster.nodes["agent-0"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == PIN
    assert node["spec"]["providerID"] == f"hcloud://{old_server}"
    assert cluster.servers["agent-0"] != old_server
    settle_after(cluster, clock, 100)
    (_, service, outcome) = cluster.lb_syncs[-1]
    assert (service, outcome) == (
        "default/hello",
        f"failed: node agent-0: server {old_server} not found",
    )


def test_the_cloud_controller_deletes_the_node_of_a_gone_server_once_not_ready(
    cluster: ka.Cluster, clock: Clock
) -> None:
    # And the volume Hetzner detached with the server stays `attached: true`: the CSI driver
    # never re-reads an attachment.
    cluster.server_deleted("agent-0")
    assert PV not in cluster.volume_servers
    settle_after(cluster, clock, 39)
    assert "agent-0" in cluster.nodes  # Ready until the 40 s grace ends
    assert attachments(cluster) == [(PV, "agent-0", True)]
    settle_after(cluster, clock, 6)
    assert "agent-0" not in cluster.nodes
    assert 40 <= when(cluster, "node agent-0 deleted") <= 45  # its next 5 s loop


# ---- rolls ----


def test_the_sole_control_plane_comes_back_as_a_new_node_and_the_load_balancer_keeps_syncing(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    old_server = cluster.servers["control-plane"]
    replace = Replacer(cluster)
    roll = roller(deployed, api, replace, clock)
    lines: list[str] = []
    roll.say = lines.append
    roll.run(rl.plan(NODES, ["control-plane"], []))
    ((_, replaced_at, _),) = replace.asked
    # k3s' finalizer would keep the Node (etcd refuses to remove its sole member, whether
    # or not its controller has tried yet): raya released it, and the Node was gone before
    # the server; the member stayed.
    assert when(cluster, "node control-plane deleted") <= replaced_at
    assert not [text for _, text in cluster.events if "member" in text and "removed" in text]
    # The new server's kubelet registered a new Node, with its provider ID.
    new_server = cluster.servers["control-plane"]
    assert new_server != old_server
    assert cluster.nodes["control-plane"]["spec"]["providerID"] == f"hcloud://{new_server}"
    assert when(cluster, f"control-plane: new Node, hcloud://{new_server}") == replaced_at + 90
    assert any(line.startswith("control-plane: back from a new boot") for line in lines)
    # Every load balancer sync since the API came back found every target.
    settle_after(cluster, clock, 100)
    after = [outcome for t, _, outcome in cluster.lb_syncs if t > replaced_at]
    assert after and all(outcome.startswith("targets ") for outcome in after)
    assert str(new_server) in after[-1].split()


def test_an_agent_with_a_hetzner_volume_goes_only_once_its_volume_is_detached(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    replace = Replacer(cluster)
    roller(deployed, api, replace, clock).run(rl.plan(NODES, ["agent-0"], []))
    ((_, replaced_at, _),) = replace.asked
    # db-0 left (30 s grace); its kubelet stopped reporting the volume in use 10 s later, and
    # the attach/detach controller detached it; only then was the server replaced.
    gone = when(cluster, "pod data/db-0 gone")
    detached = when(cluster, f"attachment {PV} -> agent-0 detached")
    assert gone + 10 <= detached <= replaced_at
    # db-0 runs again on agent-1, on the same claim, its volume attached to agent-1's server.
    (db,) = [p for p in cluster.pods if p["metadata"]["name"] == "db-0"]
    assert db["spec"]["nodeName"] == "agent-1"
    assert db["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "pgdata"
    assert ka._ready(db)
    assert cluster.volume_servers[PV] == cluster.servers["agent-1"]
    # Nothing left for agent-0: no attachment, and its new Node lists no volume.
    assert attachments(cluster) == [(PV, "agent-1", True)]
    assert not cluster.nodes["agent-0"]["status"].get("volumesAttached")
    assert cluster.nodes["agent-0"]["spec"]["providerID"] == (
        f"hcloud://{cluster.servers['agent-0']}"
    )


def test_the_sole_control_plane_refuses_pods_on_hetzner_volumes_unless_accepted(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # db-0 runs on the control plane: the roll cannot drain it there (the API goes with it).
    (db,) = [p for p in cluster.pods if p["metadata"]["name"] == "db-0"]
    db["spec"]["nodeName"] = "control-plane"
    for _ in range(3):  # unmounted on agent-0, detached there, attached to the control plane
        settle_after(cluster, clock, 20)
    assert attachments(cluster) == [(PV, "control-plane", True)]
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, clock).run(rl.plan(NODES, ["control-plane"], []))
    assert str(caught.value) == (
        "control-plane: pods on the sole control plane use Hetzner Volume claims: data/pgdata "
        "(pod db-0); they stop with its server and their volumes are attached again only once "
        "it is back (the control plane is not drained: its API goes with it); run them on "
        "agents, or pass --accept-volume-downtime; left as it was"
    )
    assert replace.asked == []
    # Accepted: the server goes with the volume attached; Hetzner detaches it, the attachment
    # stays `attached: true` until raya deletes it; then it is attached to the new server and
    # db-0 runs again there.
    roll = roller(deployed, api, replace, clock, accept_volume_downtime=True)
    lines: list[str] = []
    roll.say = lines.append
    roll.run(rl.plan(NODES, ["control-plane"], []))
    for _ in range(2):  # attached to the new server, then db-0 started on it
        settle_after(cluster, clock, 15)
    assert cluster.volume_servers[PV] == cluster.servers["control-plane"]
    (db,) = [p for p in cluster.pods if p["metadata"]["name"] == "db-0"]
    assert db["spec"]["nodeName"] == "control-plane" and ka._ready(db)
    assert f"control-plane: deleted the VolumeAttachment of {PV}, left for its old server" in lines


HA = {"control-plane": "10.0.1.10", "control-plane-1": "10.0.1.11", "control-plane-2": "10.0.1.12"}


def test_a_control_plane_among_three_is_drained_of_coredns_first(
    deployed: Run, clock: Clock, tmp_path: Path
) -> None:
    names = [*HA, "agent-0"]
    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in names},
        clock=clock.now,
        boot=100,
        cloud_controller=True,
    )
    ka.Etcd.of(state, HA)
    state.pods = [ka.pod("coredns-7b5f", "kube-system", "control-plane-1", controller="coredns")]
    replace = Replacer(state)
    with ka.deployment_api(state, deployed.resources, tmp_path) as url:
        roller(deployed, url, replace, clock, control_planes=list(HA)).run(
            rl.plan(names, ["control-plane-1"], [])
        )
    ((_, replaced_at, on_it),) = replace.asked
    assert on_it == []  # CoreDNS evicted and gone before the server
    assert when(state, "pod kube-system/coredns-7b5f gone") <= replaced_at
    (coredns,) = state.pods
    assert coredns["spec"]["nodeName"] != "control-plane-1" and ka._ready(coredns)
    assert state.nodes["control-plane-1"]["spec"]["providerID"] == (
        f"hcloud://{state.servers['control-plane-1']}"
    )


@pytest.mark.parametrize("accept", [False, True])
def test_the_command_takes_the_volume_downtime_flag(
    deployed: Run,
    cluster: ka.Cluster,
    api: str,
    clock: Clock,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    accept: bool,
) -> None:
    (db,) = [p for p in cluster.pods if p["metadata"]["name"] == "db-0"]
    db["spec"]["nodeName"] = "control-plane"
    replacer = command_replacer(deployed, cluster, api, clock, monkeypatch)
    flag = ["--accept-volume-downtime"] if accept else []
    result = invoke(["roll", "control-plane", "--root", str(project), *flag])
    if accept:
        assert result.exit_code == 0, result.output
        assert [entry[0] for entry in replacer.asked] == ["control-plane"]
    else:
        assert isinstance(result.exception, rl.RollError)
        assert "data/pgdata (pod db-0)" in str(result.exception)
        assert replacer.asked == []


def test_a_node_back_with_the_old_servers_provider_id_stops_the_roll(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # k3s restarted on agent-1's old server after raya deleted its Node: the kubelet registered
    # it again, and the new server's kubelet, up in 30 s (before the cloud controller deletes a
    # Node not Ready for 40 s), keeps that Node, naming the deleted server.
    cluster.boot = 30
    old_server = cluster.servers["agent-1"]

    def restarted_then_replaced(names: Sequence[str]) -> None:
        (name,) = names
        cluster.kubelet_restarted(name, OLD)
        Replacer(cluster)([name])

    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, restarted_then_replaced, clock, ready_timeout=200).run(
            rl.plan(NODES, ["agent-1"], [])
        )
    assert str(caught.value).startswith(
        f"agent-1: not back from a new boot Ready on {PIN} after 200 s (last seen: Ready {PIN}, "
        f"a new boot, the old server provider ID hcloud://{old_server}); "
    )
    assert cluster.nodes["agent-1"]["spec"]["providerID"] == f"hcloud://{old_server}"


def test_a_control_plane_registered_into_its_old_node_before_raya_deleted_it_stops_the_roll(
    deployed: Run, clock: Clock, tmp_path: Path
) -> None:
    # Among three, the old Node goes only once the server is gone; a new server whose kubelet
    # registers at once (a boot shorter than the roll's next request) has kept the old Node:
    # the roll says so and how to fix it, rather than delete it under a running kubelet.
    names = [*HA, "agent-0"]
    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in names}, clock=clock.now, boot=0
    )
    ka.Etcd.of(state, HA)
    with (
        ka.deployment_api(state, deployed.resources, tmp_path) as url,
        pytest.raises(rl.RollError) as caught,
    ):
        roller(deployed, url, Replacer(state), clock, control_planes=list(HA)).run(
            rl.plan(names, ["control-plane-2"], [])
        )
    assert str(caught.value) == (
        "control-plane-2: its new server registered into the old Node object before raya could "
        "delete it, and kept its provider ID: `kubectl delete node control-plane-2`, then "
        "restart k3s on it (`sudo systemctl restart k3s`); its server was replaced and the "
        "control plane is not back (no agent was touched): see `raya status` and the server's "
        "console, then `raya roll control-plane-2` again"
    )
    assert state.nodes["control-plane-2"]["spec"]["providerID"] == (
        f"hcloud://{ka.initial_server('control-plane-2')}"
    )
