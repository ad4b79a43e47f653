"""`raya roll` of a node in a location where a pod's Hetzner Volume lives, under the Kubernetes
stand-in (`tests/operate/kube_api.py`: the scheduler admits a pod only where its bound
volumes' node affinity holds; the CSI driver's location label put back on a re-registered
Node). The volume is pinned as the driver's provisioner pins it (`tests/cloud/program/
csi_topology.py`): drained with no other node of its location to go to, its pod would wait
Pending until the node is back, so the roll refuses unless that is accepted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from raya.model.unavailable import MaxUnavailable
from raya.operate import roll as rl
from tests.cloud.program import csi_topology as csi
from tests.cloud.program.mocks import Run
from tests.operate import kube_api as ka
from tests.operate.test_roll import (
    BOOT,
    OLD,
    Clock,
    Replacer,
    hetzner_volume,
    roller,
    use_claim,
)

PV = "pvc-5c1d"
WHERE = {"control-plane": "nbg1", "agent-0": "nbg1", "fsn-0": "fsn1", "fsn-1": "fsn1"}


def in_fsn1(name: str) -> dict[str, Any]:
    """A volume the driver created in fsn1: its node affinity as the provisioner writes it."""
    volume = hetzner_volume(name)
    volume["spec"]["nodeAffinity"] = csi.provision(
        {"provisioner": csi.DRIVER, "volumeBindingMode": "WaitForFirstConsumer"},
        csi.published_labels("fsn1"),
    )
    return volume


def state(clock: Clock, nodes: list[str]) -> ka.Cluster:
    """`nodes`, each labelled with its location by the CSI driver; db-0 (a StatefulSet's) on
    fsn-0 uses a claim on a volume in fsn1; web-1 on agent-0."""
    labels = {name: csi.published_labels(WHERE[name]) for name in nodes}
    found = ka.Cluster(
        nodes={name: ka.node_object(name, OLD, labels=labels[name]) for name in nodes},
        clock=clock.now,
        boot=BOOT,
        node_labels=labels,
    )
    found.pods = [
        ka.pod("db-0", "data", "fsn-0", owner="StatefulSet", grace=30),
        ka.pod("web-1", "default", "agent-0"),
    ]
    use_claim(found, "db-0", "pgdata", in_fsn1(PV))
    with found.lock:
        found.settle()
    return found


@pytest.fixture
def alone(clock: Clock) -> ka.Cluster:
    return state(clock, ["control-plane", "agent-0", "fsn-0"])


@pytest.fixture
def paired(clock: Clock) -> ka.Cluster:
    return state(clock, ["control-plane", "agent-0", "fsn-0", "fsn-1"])


@pytest.fixture
def alone_api(deployed: Run, alone: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(alone, deployed.resources, tmp_path) as url:
        yield url


@pytest.fixture
def paired_api(deployed: Run, paired: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(paired, deployed.resources, tmp_path) as url:
        yield url


def changes(cluster: ka.Cluster) -> list[str]:
    return [path for _, method, path in cluster.log if method in ("PATCH", "POST", "DELETE")]


STRANDED = r"data/pgdata \(pod db-0; pinned to csi\.hetzner\.cloud/location in fsn1\)"


def db(cluster: ka.Cluster) -> dict[str, Any]:
    (found,) = [p for p in cluster.pods if p["metadata"]["name"] == "db-0"]
    return found


def test_the_stand_in_schedules_a_pod_only_where_its_volume_is(
    alone: ka.Cluster, clock: Clock
) -> None:
    """The rule the refusal rests on: db-0, gone from fsn-0, goes nowhere else (agent-0 is
    Ready and schedulable, but in nbg1) until an fsn1 node takes it."""
    alone.nodes["fsn-0"]["spec"]["unschedulable"] = True
    with alone.lock:
        alone.delete(db(alone), 0)
        clock.t += 1
        alone.settle()
    assert db(alone)["spec"]["nodeName"] == ""
    alone.nodes["fsn-0"]["spec"]["unschedulable"] = False
    with alone.lock:
        alone.settle()
    assert db(alone)["spec"]["nodeName"] == "fsn-0"


def test_the_last_node_of_a_location_is_not_drained_under_its_volumes(
    deployed: Run, alone: ka.Cluster, alone_api: str, clock: Clock
) -> None:
    replace = Replacer(alone)
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, alone_api, replace, clock).run(rl.plan(list(WHERE), ["fsn-0"], []))
    assert str(caught.value) == (
        "fsn-0: pods on Hetzner Volumes would have no node to go to while this node is "
        "replaced (no other node where their volume is, Ready and schedulable): data/pgdata "
        "(pod db-0; pinned to csi.hetzner.cloud/location in fsn1); they would stay Pending "
        "until it is back. Add a node there first (a pool in that location), or pass "
        "--accept-volume-downtime; left as it was"
    )
    # Checked before anything changes: not even cordoned.
    assert replace.asked == [] and changes(alone) == []


def test_accepted_the_pod_waits_for_its_node_and_never_leaves_its_location(
    deployed: Run, alone: ka.Cluster, alone_api: str, clock: Clock
) -> None:
    replace = Replacer(alone)
    roll = roller(deployed, alone_api, replace, clock, accept_volume_downtime=True)
    lines: list[str] = []
    roll.say = lines.append
    roll.run(rl.plan(list(WHERE), ["fsn-0"], []))
    assert (
        "fsn-0: down with it until it is back, as accepted: data/pgdata (pod db-0; pinned to "
        "csi.hetzner.cloud/location in fsn1)"
    ) in lines
    ((_, replaced_at, _),) = replace.asked
    # Re-created by its StatefulSet while fsn-0 was drained, it waited, unscheduled.
    created = [t for t, e in alone.events if e == "pod data/db-0 created by StatefulSet db"]
    assert created and created[0] <= replaced_at
    for _ in range(3):
        clock.t += 15
        with alone.lock:
            alone.settle()
    assert db(alone)["spec"]["nodeName"] == "fsn-0" and ka._ready(db(alone))
    assert alone.nodes["fsn-0"]["metadata"]["labels"]["csi.hetzner.cloud/location"] == "fsn1"
    assert alone.volume_servers[PV] == alone.servers["fsn-0"]


def test_another_node_of_the_location_takes_the_pod(
    deployed: Run, paired: ka.Cluster, paired_api: str, clock: Clock
) -> None:
    replace = Replacer(paired)
    roller(deployed, paired_api, replace, clock).run(rl.plan(list(WHERE), ["fsn-0"], []))
    assert [name for name, _, _ in replace.asked] == ["fsn-0"]
    # Not agent-0, the first Ready node by name: the volume's node affinity admits fsn1's.
    assert db(paired)["spec"]["nodeName"] == "fsn-1"
    assert paired.volume_servers[PV] == paired.servers["fsn-1"]


def test_a_cordoned_or_tainted_peer_does_not_count(
    deployed: Run, paired: ka.Cluster, paired_api: str, clock: Clock
) -> None:
    peer = paired.nodes["fsn-1"]
    peer["spec"]["unschedulable"] = True
    # The cordoned peer counts against its pool's budget: two of it may be unavailable here,
    # so that the roll reaches the volume check.
    two = MaxUnavailable.parse("2")
    with pytest.raises(rl.RollError, match=STRANDED):
        roller(deployed, paired_api, Replacer(paired), clock, max_unavailable=two).run(
            rl.plan(list(WHERE), ["fsn-0"], [])
        )
    peer["spec"]["unschedulable"] = False
    peer["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    with pytest.raises(rl.RollError, match=STRANDED):
        roller(deployed, paired_api, Replacer(paired), clock).run(
            rl.plan(list(WHERE), ["fsn-0"], [])
        )
    # A pod that tolerates it may go there: the check passes (then the drain runs).
    db(paired)["spec"]["tolerations"] = [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]
    assert rl.stranded(roller(deployed, paired_api, None, clock).kube, "fsn-0") == []


def node(labels: dict[str, str], name: str = "n") -> Any:
    return k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name=name, labels=labels),
        spec=k8s.V1NodeSpec(),
        status=k8s.V1NodeStatus(conditions=[k8s.V1NodeCondition(type="Ready", status="True")]),
    )


def pinned(*terms: list[tuple[str, str, list[str]]], fields: bool = False) -> Any:
    requirement = k8s.V1NodeSelectorRequirement
    selector_terms = [
        k8s.V1NodeSelectorTerm(
            **{
                "match_fields" if fields else "match_expressions": [
                    requirement(key=k, operator=o, values=v or None) for k, o, v in term
                ]
            }
        )
        for term in terms
    ]
    return k8s.V1PersistentVolume(
        spec=k8s.V1PersistentVolumeSpec(
            node_affinity=k8s.V1VolumeNodeAffinity(
                required=k8s.V1NodeSelector(node_selector_terms=selector_terms)
            )
        )
    )


@pytest.mark.parametrize(
    ("volume", "labels", "fits"),
    [
        (k8s.V1PersistentVolume(spec=k8s.V1PersistentVolumeSpec()), {}, True),
        (pinned([("zone", "In", ["a", "b"])]), {"zone": "b"}, True),
        (pinned([("zone", "In", ["a"])]), {"zone": "b"}, False),
        (pinned([("zone", "In", ["a"])]), {}, False),
        (pinned([("zone", "NotIn", ["a"])]), {}, True),  # absent: not in
        (pinned([("zone", "NotIn", ["a"])]), {"zone": "a"}, False),
        (pinned([("gpu", "Exists", [])]), {"gpu": ""}, True),
        (pinned([("gpu", "DoesNotExist", [])]), {"gpu": ""}, False),
        (pinned([("cores", "Gt", ["4"])]), {"cores": "8"}, True),
        (pinned([("cores", "Gt", ["4"])]), {"cores": "many"}, False),
        (pinned([("cores", "Lt", ["4"])]), {"cores": "2"}, True),
        # Terms are alternatives, expressions of a term all hold; an empty term admits none.
        (pinned([("zone", "In", ["a"])], [("zone", "In", ["b"])]), {"zone": "b"}, True),
        (pinned([("zone", "In", ["b"]), ("gpu", "Exists", [])]), {"zone": "b"}, False),
        (pinned([]), {"zone": "b"}, False),
        (pinned([("metadata.name", "In", ["n"])], fields=True), {}, True),
        (pinned([("metadata.name", "NotIn", ["n"])], fields=True), {}, False),
    ],
)
def test_a_volumes_node_affinity_as_kubernetes_reads_it(
    volume: Any, labels: dict[str, str], fits: bool
) -> None:
    assert rl.volume_fits(volume, node(labels)) is fits


GPU = k8s.V1Taint(key="dedicated", value="gpu", effect="NoSchedule")


@pytest.mark.parametrize(
    ("taints", "tolerations", "cordoned", "takes"),
    [
        ([], [], False, True),
        ([], [], True, False),  # a cordon: the scheduler's NodeUnschedulable
        ([GPU], [], False, False),
        ([GPU], [k8s.V1Toleration(key="dedicated", value="gpu", effect="NoSchedule")], False, True),
        ([GPU], [k8s.V1Toleration(key="dedicated", value="cpu")], False, False),
        ([GPU], [k8s.V1Toleration(key="dedicated", operator="Exists")], False, True),
        ([GPU], [k8s.V1Toleration(operator="Exists")], False, True),  # every taint
        ([GPU], [k8s.V1Toleration(operator="Exists", effect="NoExecute")], False, False),
        ([k8s.V1Taint(key="spot", effect="PreferNoSchedule")], [], False, True),
        ([k8s.V1Taint(key="drain", effect="NoExecute")], [], False, False),
        (
            [],
            [k8s.V1Toleration(key="node.kubernetes.io/unschedulable", operator="Exists")],
            True,
            True,
        ),
    ],
)
def test_whether_a_node_takes_a_pod_by_its_taints(
    taints: list[Any], tolerations: list[Any], cordoned: bool, takes: bool
) -> None:
    found = node({})
    found.spec = k8s.V1NodeSpec(taints=taints, unschedulable=cordoned)
    pod = k8s.V1Pod(spec=k8s.V1PodSpec(containers=[], tolerations=tolerations))
    assert rl.takes(found, pod) is takes


def test_a_node_not_ready_takes_nothing() -> None:
    found = node({})
    found.status.conditions = [k8s.V1NodeCondition(type="Ready", status="Unknown")]
    assert rl.takes(found, k8s.V1Pod(spec=k8s.V1PodSpec(containers=[]))) is False
