"""The Kubernetes API stand-in does what its docstring cites of the real API server, its
controllers and the kubelet, asked through the official client as raya asks it."""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from urllib3.exceptions import MaxRetryError

from raya.cloud.kubeconfig import api_client
from tests.cloud.program.mocks import Run
from tests.operate import kube_api as ka


class Time:
    def __init__(self) -> None:
        self.now = 0.0


@pytest.fixture
def time() -> Time:
    return Time()


@pytest.fixture
def cluster(time: Time) -> ka.Cluster:
    nodes = {name: ka.node_object(name, "v1") for name in ("control-plane", "agent-0", "agent-1")}
    return ka.Cluster(nodes=nodes, clock=lambda: time.now)


@pytest.fixture
def served(deployed: Run, cluster: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(cluster, deployed.resources, tmp_path) as url:
        yield url


@pytest.fixture
def core(deployed: Run, served: str) -> Any:
    return k8s.CoreV1Api(api_client(deployed.outputs["kubeconfig"], server=served))


def evict(core: Any, name: str, namespace: str = "default") -> int:
    body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace))
    try:
        core.create_namespaced_pod_eviction(name, namespace, body)
    except k8s.ApiException as error:
        return int(error.status)
    return 201


def listed(core: Any) -> dict[str, Any]:
    return {p.metadata.name: p for p in core.list_pod_for_all_namespaces().items}


def test_an_evicted_pod_stays_terminating_for_its_grace_period(
    cluster: ka.Cluster, core: Any, time: Time
) -> None:
    cluster.pods = [ka.pod("web-0", "default", "agent-0", owner="StatefulSet")]
    assert evict(core, "web-0") == 201
    pod = listed(core)["web-0"]
    assert pod.metadata.deletion_timestamp.isoformat() == "2026-12-01T00:00:30+00:00"
    assert pod.metadata.deletion_grace_period_seconds == 30  # the default grace
    time.now = 29
    assert listed(core)["web-0"].metadata.deletion_timestamp is not None
    # Gone at 30 s; the StatefulSet re-creates a pod of that name only then.
    time.now = 30
    again = listed(core)["web-0"]
    assert again.metadata.deletion_timestamp is None
    assert again.status.start_time.isoformat() == "2026-12-01T00:00:30+00:00"


def test_delete_honours_the_grace_period_and_only_shortens_it(
    cluster: ka.Cluster, core: Any, time: Time
) -> None:
    cluster.pods = [
        ka.pod("a-0", "default", "agent-0", owner=None, grace=600),
        ka.pod("b-0", "default", "agent-0", owner=None),
    ]
    core.delete_namespaced_pod("a-0", "default")
    assert listed(core)["a-0"].metadata.deletion_grace_period_seconds == 600
    core.delete_namespaced_pod("a-0", "default", grace_period_seconds=10)
    core.delete_namespaced_pod("a-0", "default", grace_period_seconds=60)
    assert listed(core)["a-0"].metadata.deletion_grace_period_seconds == 10
    core.delete_namespaced_pod("b-0", "default", grace_period_seconds=0)
    assert sorted(listed(core)) == ["a-0"]
    time.now = 10
    assert listed(core) == {}


def test_a_budget_decides_from_healthy_pods(
    cluster: ka.Cluster, core: Any, time: Time
) -> None:
    cluster.pods = [ka.pod(f"web-{i}", "default", "agent-0") for i in range(3)]
    cluster.budgets = [ka.budget("web", "default", "web", minAvailable="50%")]  # 2 of 3
    assert evict(core, "web-0") == 201
    assert evict(core, "web-1") == 429
    # The ReplicaSet's replacement is Ready 10 s after it is scheduled: then one more may go.
    time.now = 10
    assert evict(core, "web-1") == 201
    assert evict(core, "web-2") == 429
    cluster.budgets.append(ka.budget("also", "default", "web", maxUnavailable=1))
    assert evict(core, "web-2") == 500  # two budgets for one pod: the API refuses


def test_a_replaced_server_registers_again_only_from_a_new_boot(
    cluster: ka.Cluster, core: Any, time: Time
) -> None:
    with pytest.raises(ValueError, match="agent-0: a server with this name exists"):
        cluster.server_created("agent-0", "v2")
    cluster.server_deleted("agent-0")
    time.now = 39
    node = core.read_node("agent-0")
    assert (node.status.node_info.boot_id, node.status.conditions[0].status) == ("b0", "True")
    time.now = 40
    assert core.read_node("agent-0").status.conditions[0].status == "Unknown"
    cluster.server_created("agent-0", "v2")
    time.now = 40 + 89
    assert core.read_node("agent-0").status.node_info.boot_id == "b0"
    time.now = 40 + 90
    node = core.read_node("agent-0")
    assert node.status.node_info.boot_id != "b0"
    assert (node.status.node_info.kubelet_version, node.status.conditions[0].status) == (
        "v2",
        "True",
    )


def test_nothing_answers_while_the_control_plane_boots(
    cluster: ka.Cluster, core: Any, time: Time
) -> None:
    cluster.server_deleted("control-plane")
    cluster.server_created("control-plane", "v2")
    with pytest.raises(MaxRetryError, match="Remote end closed connection without response"):
        core.list_node()
    time.now = 90
    assert len(core.list_node().items) == 3


def test_a_request_without_a_client_certificate_is_unauthorized(deployed: Run, served: str) -> None:
    context = ssl.create_default_context(cadata=deployed.resources["server-ca"].outputs["certPem"])
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{served}/api/v1/nodes", context=context)
    assert caught.value.code == 401


def pending(name: str, **spec: Any) -> dict[str, Any]:
    """A pod its controller just made: no node yet, `spec` beside its containers."""
    made = ka.pod(name, "default", "")
    made["spec"].update(spec)
    made["status"] = {"phase": "Pending"}
    return made


def test_the_scheduler_marks_the_pods_it_cannot_place_unschedulable(
    cluster: ka.Cluster, core: Any
) -> None:
    cluster.nodes["agent-1"]["spec"]["taints"] = [
        {"key": "burst", "value": "yes", "effect": "NoSchedule"}
    ]
    cluster.nodes["agent-1"]["metadata"]["labels"]["tier"] = "burst"
    tolerant = [{"key": "burst", "operator": "Exists", "effect": "NoSchedule"}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["burst"]}]}]}}}  # fmt: skip
    cluster.pods = [
        pending("fits-0"),  # anywhere
        pending("gpu-0", nodeSelector={"gpu": "yes"}),  # no node has that label
        pending("burst-0", nodeSelector={"tier": "burst"}),  # its node's taint not tolerated
        pending("burst-1", nodeSelector={"tier": "burst"}, tolerations=tolerant),
        pending("burst-2", affinity=affinity),  # required affinity, the taint not tolerated
        pending("burst-3", nodeSelector={"tier": "burst"}, tolerations=[  # another value
            {"key": "burst", "operator": "Equal", "value": "no", "effect": "NoSchedule"}]),
        pending("gated-0", schedulingGates=[{"name": "example.com/quota"}]),
    ]
    pods = listed(core)
    scheduled = {
        name: [(c.type, c.status, c.reason) for c in pod.status.conditions or []
               if c.type == "PodScheduled"]
        for name, pod in pods.items()
    }  # fmt: skip
    assert scheduled == {
        "fits-0": [("PodScheduled", "True", None)],
        "gpu-0": [("PodScheduled", "False", "Unschedulable")],
        "burst-0": [("PodScheduled", "False", "Unschedulable")],
        "burst-1": [("PodScheduled", "True", None)],
        "burst-2": [("PodScheduled", "False", "Unschedulable")],
        "burst-3": [("PodScheduled", "False", "Unschedulable")],
        "gated-0": [("PodScheduled", "False", "SchedulingGated")],
    }
    assert pods["burst-1"].spec.node_name == "agent-1"
    assert not pods["gpu-0"].spec.node_name and pods["gpu-0"].status.phase == "Pending"


def test_pods_are_listed_by_the_fields_the_api_server_selects_on(
    cluster: ka.Cluster, core: Any
) -> None:
    done = ka.pod("job-0", "default", "agent-0")
    done["status"]["phase"] = "Succeeded"
    gpu = pending("gpu-0", nodeSelector={"gpu": "yes"})
    cluster.pods = [ka.pod("web-0", "default", "agent-0"), done, gpu]

    def names(selector: str) -> list[str]:
        found = core.list_pod_for_all_namespaces(field_selector=selector).items
        return sorted(p.metadata.name for p in found)

    # The cluster autoscaler's own selector of pods without a node (listers.go).
    assert names("spec.nodeName==,status.phase!=Succeeded,status.phase!=Failed") == ["gpu-0"]
    assert names("spec.nodeName=agent-0") == ["job-0", "web-0"]
    assert names("spec.nodeName=agent-0,status.phase!=Succeeded") == ["web-0"]
    assert names("status.phase=Pending,metadata.namespace=default") == ["gpu-0"]
    with pytest.raises(k8s.ApiException) as refused:
        names("status.conditions=x")
    assert refused.value.status == 400
    assert "field label not supported: status.conditions" in str(refused.value.body)
