"""`raya roll` against the Kubernetes API stand-in (`tests/operate/kube_api.py`: evicted pods
Terminating for their grace period, PodDisruptionBudgets computed as the disruption controller
does, nodes that come back only from a new boot of a re-created server) over real TLS on
127.0.0.1 with the cluster's own CAs; a stand-in for `raya up --replace` that deletes the
node's server and creates it again, as Hetzner sees it; and one clock, read by both, that only
moves when the roll sleeps."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raya.cloud import deploy
from raya.cloud.kubeconfig import api_client
from raya.operate import roll as rl
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import PINS
from tests.operate import kube_api as ka
from tests.runner import invoke

PIN = PINS.k3s.version
OLD = "v1.30.0+k3s1"
NODES = ["control-plane", "agent-0", "agent-1", "agent-2"]
BOOT = 90.0  # seconds from a server's creation until its kubelet posts Ready


class Clock(rl.Clock):
    """Time that only moves when the roll sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        super().__init__(now=lambda: self.t, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def cluster(clock: Clock) -> ka.Cluster:
    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in NODES}, clock=clock.now, boot=BOOT
    )
    state.pods = [
        ka.pod("web-1", "default", "agent-0"),  # a ReplicaSet's, default grace (30 s)
        ka.pod("db-0", "data", "agent-0", owner="StatefulSet", grace=120),
        ka.pod("flannel-x", "kube-system", "agent-0", owner="DaemonSet"),
        ka.pod(
            "static",
            "kube-system",
            "agent-0",
            owner=None,
            annotations={"kubernetes.io/config.mirror": "x"},
        ),
        ka.pod("web-2", "default", "agent-1"),
    ]
    return state


@pytest.fixture
def api(deployed: Run, cluster: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(cluster, deployed.resources, tmp_path) as url:
        yield url


class Replacer:
    """What `raya up --replace NODE` does, as Hetzner sees it: the node's server deleted, then
    a new one created from the current inputs (on the pin), which boots. A node in
    `never_back` gets a server whose boot never reaches k3s."""

    def __init__(self, cluster: ka.Cluster, never_back: frozenset[str] = frozenset()) -> None:
        self.cluster, self.never_back = cluster, never_back
        self.asked: list[tuple[str, float, list[str]]] = []  # node, when, its pods then

    def __call__(self, names: Sequence[str]) -> None:
        with self.cluster.lock:
            self.cluster.settle()
            for name in names:
                on_it = [
                    p["metadata"]["name"]
                    for p in self.cluster.pods
                    if p["spec"]["nodeName"] == name
                ]
                self.asked.append((name, self.cluster.clock(), sorted(on_it)))
                self.cluster.server_deleted(name)
                self.cluster.server_created(name, PIN, comes_up=name not in self.never_back)


def roller(deployed: Run, url: str, replace: Any, clock: Clock, **kwargs: Any) -> rl.Roll:
    kube = rl.Kubernetes(api_client(deployed.outputs["kubeconfig"], server=url))
    lines: list[str] = []
    return rl.Roll(
        kube=kube, replace=replace, kubelet_version=PIN, say=lines.append, clock=clock, **kwargs
    )


def posts(cluster: ka.Cluster) -> list[str]:
    return [path for _, method, path in cluster.log if method == "POST"]


def when(cluster: ka.Cluster, event: str) -> float:
    (moment,) = [t for t, text in cluster.events if text == event]
    return moment


def test_plan_puts_the_control_plane_first_then_the_agents_in_fleet_order() -> None:
    steps = rl.plan(NODES, [], ["agent-2", "control-plane", "agent-0"])
    assert [(s.node, rl.DRAIN in s.actions) for s in steps] == [
        ("control-plane", False),
        ("agent-0", True),
        ("agent-2", True),
    ]
    assert [s.node for s in rl.plan(NODES, ["agent-1"], ["agent-0"])] == ["agent-1"]
    assert rl.plan(NODES, [], []) == []
    with pytest.raises(rl.RollError, match="no node agent-7 in the cluster; accepted: control"):
        rl.plan(NODES, ["agent-7"], [])


def test_an_agent_is_replaced_only_once_its_pods_are_gone_and_back_as_a_new_node(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # A config drift: the node already runs the pin, so only its boot ID tells the new boot.
    cluster.nodes["agent-0"]["status"]["nodeInfo"]["kubeletVersion"] = PIN
    replace = Replacer(cluster)
    roller(deployed, api, replace, clock).run(rl.plan(NODES, ["agent-0"], []))
    # Evicted once each; the server replaced only after db-0's 120 s grace ran out, with
    # only the pods a drain leaves (DaemonSet, mirror) still on the node.
    assert posts(cluster) == [
        "/api/v1/namespaces/default/pods/web-1/eviction",
        "/api/v1/namespaces/data/pods/db-0/eviction",
    ]
    ((node, replaced_at, pods_then),) = replace.asked
    assert (node, pods_then) == ("agent-0", ["flannel-x", "static"])
    assert when(cluster, "pod data/db-0 gone") >= 120
    assert replaced_at >= when(cluster, "pod data/db-0 gone")
    # Its Node object deleted once drained, before the server; the new server's kubelet
    # registered a new Node 90 s after it was created: schedulable, the new server's ID.
    deleted = when(cluster, "node agent-0 deleted")
    assert deleted <= replaced_at
    new_boot = cluster.nodes["agent-0"]["status"]["nodeInfo"]["bootID"]
    registered = when(cluster, f"agent-0: registered, boot {new_boot}")
    assert registered == replaced_at + 90
    assert when(cluster, f"agent-0: new Node, hcloud://{cluster.servers['agent-0']}") == registered
    assert cluster.nodes["agent-0"]["spec"]["providerID"] == (
        f"hcloud://{cluster.servers['agent-0']}"
    )
    assert cluster.servers["agent-0"] != ka.initial_server("agent-0")
    patches = [path for _, method, path in cluster.log if method == "PATCH"]
    assert patches == ["/api/v1/nodes/agent-0"]  # the cordon; the new Node is schedulable
    assert cluster.nodes["agent-0"]["spec"]["unschedulable"] is False
    # The ReplicaSet and StatefulSet put their pods elsewhere; another node's pod is untouched.
    on_agent_1 = sorted(
        p["metadata"]["name"] for p in cluster.pods if p["spec"]["nodeName"] == "agent-1"
    )
    assert "web-2" in on_agent_1 and "db-0" in on_agent_1 and len(on_agent_1) == 3


def test_a_budget_refuses_until_the_replacement_pod_is_ready(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    # Two replicas on agent-0, at most one unavailable: the second eviction is refused until
    # the ReplicaSet's replacement for the first runs Ready elsewhere (10 s after it starts).
    cluster.pods += [ka.pod("api-a", "default", "agent-0"), ka.pod("api-b", "default", "agent-0")]
    cluster.budgets.append(ka.budget("api", "default", "api", maxUnavailable=1))
    roller(deployed, api, Replacer(cluster), clock).run(rl.plan(NODES, ["agent-0"], []))
    evictions = posts(cluster)
    assert evictions.count("/api/v1/namespaces/default/pods/api-a/eviction") == 1
    assert evictions.count("/api/v1/namespaces/default/pods/api-b/eviction") == 3  # 429, 429, 201
    assert not any("flannel" in path or "static" in path for path in evictions)
    assert cluster.budgets[0]["status"]["currentHealthy"] == 2


def test_a_budget_that_never_allows_times_out_and_stops_the_roll(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    cluster.budgets.append(ka.budget("db", "data", "db", minAvailable=1))  # one replica
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, clock, drain_timeout=30).run(
            rl.plan(NODES, [], ["agent-0", "agent-1"])
        )
    assert str(caught.value) == (
        "agent-0: drain timed out after 30 s; refused by a PodDisruptionBudget: data/db-0; "
        "left cordoned: `kubectl uncordon agent-0`, or roll it again; not touched: agent-1"
    )
    assert replace.asked == []  # never replaced with pods still on it
    assert cluster.nodes["agent-0"]["spec"]["unschedulable"] is True
    assert cluster.nodes["agent-1"]["spec"]["unschedulable"] is False


def test_the_drain_timeout_names_the_pods_still_terminating(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, clock, drain_timeout=60).run(rl.plan(NODES, ["agent-0"], []))
    # web-1 (30 s grace) has left; db-0 (120 s) is still Terminating after 60 s.
    assert str(caught.value).startswith(
        "agent-0: drain timed out after 60 s; still terminating: data/db-0; left cordoned"
    )
    assert replace.asked == []


def test_a_bare_pod_stops_the_drain(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    cluster.pods.append(ka.pod("scratch", "default", "agent-0", owner=None))
    with pytest.raises(rl.RollError, match="would be lost: default/scratch"):
        roller(deployed, api, Replacer(cluster), clock).run(rl.plan(NODES, ["agent-0"], []))
    assert not any(path.endswith("/scratch/eviction") for path in posts(cluster))


def test_a_node_that_never_comes_back_stops_the_roll_and_says_what_it_left(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    replace = Replacer(cluster, never_back=frozenset({"agent-1"}))
    steps = rl.plan(NODES, [], ["agent-1", "agent-2"])
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, clock, ready_timeout=60).run(steps)
    # Its Node object was deleted before the server; none registered again.
    assert str(caught.value) == (
        f"agent-1: not back from a new boot Ready on {PIN} after 60 s "
        "(last seen: not registered); its server was replaced and the node is "
        "not back: see `raya status` and the server's console, then "
        "`raya roll agent-1` again; not touched: agent-2"
    )
    assert [name for name, _, _ in replace.asked] == ["agent-1"]
    assert "agent-1" not in cluster.nodes
    assert cluster.nodes["agent-2"]["spec"]["unschedulable"] is False


def test_the_control_plane_comes_back_before_any_agent_is_touched(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    replace = Replacer(cluster)
    roller(deployed, api, replace, clock).run(rl.plan(NODES, [], ["agent-2", "control-plane"]))
    assert [name for name, _, _ in replace.asked] == ["control-plane", "agent-2"]
    new_boot = cluster.nodes["control-plane"]["status"]["nodeInfo"]["bootID"]
    back = when(cluster, f"control-plane: registered, boot {new_boot}")
    assert back == replace.asked[0][1] + 90
    # While it booted the API did not answer; the first change to an agent came after.
    first_change = min(t for t, method, _ in cluster.log if method in ("PATCH", "POST"))
    assert first_change >= back


def test_a_control_plane_that_never_comes_back_stops_the_roll_before_the_agents(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    replace = Replacer(cluster, never_back=frozenset({"control-plane"}))
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, clock, ready_timeout=120).run(
            rl.plan(NODES, [], ["agent-0", "control-plane"])
        )
    message = str(caught.value)
    assert message.startswith(
        f"control-plane: not back from a new boot Ready on {PIN} after 120 s (last seen: API: "
        "Remote end closed connection without response); "
    )
    assert message.endswith(
        "its server was replaced and the control plane is not back (no agent was touched): see "
        "`raya status` and the server's console, then `raya roll control-plane` again; "
        "not touched: agent-0"
    )
    assert [name for name, _, _ in replace.asked] == ["control-plane"]


def test_after_the_control_plane_every_node_must_be_ready(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    cluster.nodes["agent-2"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, Replacer(cluster), clock, ready_timeout=120).run(
            rl.plan(NODES, ["control-plane"], [])
        )
    assert str(caught.value) == (
        "control-plane: nodes not Ready after 120 s: agent-2; the control plane is back; "
        "no agent was touched: see `raya status`"
    )


def test_the_command_rolls_the_drifting_nodes_through_raya_up(
    deployed: Run,
    cluster: ka.Cluster,
    api: str,
    clock: Clock,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replacer = Replacer(cluster)
    runs: list[tuple[str, tuple[str, ...]]] = []

    def fake_run(action: str, root: Path, stack: str, on_output: Any, **kwargs: Any) -> Any:
        assert (root, stack) == (project, "prod")
        runs.append((action, tuple(kwargs.get("replace", ()))))
        if action == "up":
            (node,) = kwargs["replace"]
            replacer([node])
        return SimpleNamespace(drift={"agent-2": ("image",), "control-plane": ("users",)})

    monkeypatch.setattr(deploy, "run", fake_run)
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setattr(
        "raya.commands.operate.kube_api_client", lambda text: api_client(text, server=api)
    )
    monkeypatch.setattr(rl, "Clock", lambda: clock)  # the stand-in's time
    dry = invoke(["roll", "--root", str(project), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert runs == [("preview", ())]
    assert dry.stdout.splitlines() == [
        "control-plane:",
        "  1. check that no pod on it uses a local-path claim (or --accept-local-data-loss)",
        "  2. check that no pod on it uses a Hetzner Volume claim (or --accept-volume-downtime)",
        "  3. delete its Node object, releasing k3s' etcd finalizer (the sole etcd member stays)",
        "  4. replace its server with its batch's in one targeted engine run (raya up --replace "
        "NODES, `pulumi up --target` their servers `--target-dependents`: shut down, wait until "
        "off, delete, create)",
        "  5. wait until the new server registers a new Node (a new boot, the new server's "
        "provider ID), Ready on the pinned k3s",
        "  6. delete the VolumeAttachments left for the old server",
        "  7. wait until every node is Ready",
        "agent-2:",
        "  1. check that no pod on it uses a local-path claim (or --accept-local-data-loss)",
        "  2. check that each Hetzner Volume its pods use has another Ready, schedulable node "
        "where the volume is (or --accept-volume-downtime)",
        "  3. cordon",
        "  4. drain: evict its pods, wait until they are gone",
        "  5. wait until its volumes are detached (no VolumeAttachment, volumesAttached empty)",
        "  6. delete its Node object (its running kubelet does not register again)",
        "  7. replace its server with its batch's in one targeted engine run (raya up --replace "
        "NODES, `pulumi up --target` their servers `--target-dependents`: shut down, wait until "
        "off, delete, create)",
        "  8. delete the VolumeAttachments left for the old server",
        "  9. wait until the new server registers a new Node (a new boot, the new server's "
        "provider ID), Ready on the pinned k3s",
        "batches (--max-unavailable 10% of each pool; fewer while nodes of a pool are "
        "unavailable):",
        "  1. control-plane",
        "  2. agent-2",
    ]
    result = invoke(["roll", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert runs[1:] == [("preview", ()), ("up", ("control-plane",)), ("up", ("agent-2",))]
    assert "rolled 2 node(s)" in result.stdout


# ---- volumes: a Hetzner Volume moves with its pod, a local-path one would be lost ----


def local_path_volume(name: str, node: str) -> dict[str, Any]:
    """A PersistentVolume as k3s' local-path provisioner makes it: a hostPath under its
    storage folder, pinned to the node (rancher/local-path-provisioner, provisioner.go)."""
    return {
        "kind": "PersistentVolume",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "local-path",
            "hostPath": {
                "path": f"/var/lib/rancher/k3s/storage/{name}_data_pgdata",
                "type": "DirectoryOrCreate",
            },
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Bound"},
    }


def hetzner_volume(name: str) -> dict[str, Any]:
    """A PersistentVolume as Hetzner's CSI driver provisions it: a `csi` source."""
    return {
        "kind": "PersistentVolume",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "hcloud-volumes",
            "csi": {"driver": "csi.hetzner.cloud", "volumeHandle": "100234", "fsType": "ext4"},
        },
        "status": {"phase": "Bound"},
    }


def use_claim(
    cluster: ka.Cluster, pod: str, claim: str, volume: dict[str, Any] | None
) -> None:
    """Pod `pod` mounts claim `claim` of its namespace, bound to `volume` (None: pending)."""
    (found,) = [p for p in cluster.pods if p["metadata"]["name"] == pod]
    namespace = found["metadata"]["namespace"]
    found["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    spec = {"volumeName": volume["metadata"]["name"]} if volume else {}
    cluster.objects[f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}"] = {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], **spec},
    }
    if volume:
        cluster.objects[f"/api/v1/persistentvolumes/{volume['metadata']['name']}"] = volume


def test_a_local_path_claim_blocks_the_roll_and_is_named(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    use_claim(cluster, "db-0", "pgdata", local_path_volume("pvc-1a2b", "agent-0"))
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, clock).run(rl.plan(NODES, [], ["agent-0", "agent-1"]))
    assert str(caught.value) == (
        "agent-0: local-path claims on this node's disk would be lost with its server: "
        "data/pgdata (pod db-0); move their data to hcloud-volumes claims, or pass "
        "--accept-local-data-loss; left as it was; not touched: agent-1"
    )
    assert replace.asked == []
    # Checked before anything changes: not even cordoned.
    assert not [path for _, method, path in cluster.log if method in ("PATCH", "POST")]


def test_accepting_the_loss_rolls_the_node_and_says_so(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    use_claim(cluster, "db-0", "pgdata", local_path_volume("pvc-1a2b", "agent-0"))
    replace = Replacer(cluster)
    roll = roller(deployed, api, replace, clock, accept_local_loss=True)
    lines: list[str] = []
    roll.say = lines.append
    roll.run(rl.plan(NODES, ["agent-0"], []))
    assert [entry[0] for entry in replace.asked] == ["agent-0"]
    assert "agent-0: losing the local-path claims, as accepted: data/pgdata (pod db-0)" in lines


def test_a_hetzner_volume_claim_moves_with_its_pod(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock
) -> None:
    use_claim(cluster, "db-0", "pgdata", hetzner_volume("pvc-9f8e"))
    use_claim(cluster, "web-1", "cache", None)  # not bound yet: nothing on the node's disk
    replace = Replacer(cluster)
    roller(deployed, api, replace, clock).run(rl.plan(NODES, ["agent-0"], []))
    # Evicted like any pod, the node replaced once it left (the CSI driver detaches).
    assert [(name, pods) for name, _, pods in replace.asked] == [
        ("agent-0", ["flannel-x", "static"])
    ]
    assert "/api/v1/namespaces/data/pods/db-0/eviction" in posts(cluster)
    assert ("GET", "/api/v1/persistentvolumes/pvc-9f8e") in [
        (method, path) for _, method, path in cluster.log
    ]


def command_replacer(
    deployed: Run, cluster: ka.Cluster, api: str, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> Replacer:
    """`raya roll` run as the command: its `raya up --replace` replaces servers in the
    stand-in, its outputs are the deployment's, its API and its clock the stand-in's."""
    replacer = Replacer(cluster)

    def fake_run(action: str, root: Path, stack: str, on_output: Any, **kwargs: Any) -> Any:
        if action == "up":
            replacer(kwargs["replace"])
        return SimpleNamespace(drift={})

    monkeypatch.setattr(deploy, "run", fake_run)
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setattr(
        "raya.commands.operate.kube_api_client", lambda text: api_client(text, server=api)
    )
    monkeypatch.setattr(rl, "Clock", lambda: clock)  # the stand-in's time
    return replacer


@pytest.mark.parametrize("accept", [False, True])
def test_the_command_takes_the_flag(
    deployed: Run,
    cluster: ka.Cluster,
    api: str,
    clock: Clock,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    accept: bool,
) -> None:
    use_claim(cluster, "db-0", "pgdata", local_path_volume("pvc-1a2b", "agent-0"))
    replacer = command_replacer(deployed, cluster, api, clock, monkeypatch)
    flag = ["--accept-local-data-loss"] if accept else []
    result = invoke(["roll", "agent-0", "--root", str(project), *flag])
    if accept:
        assert result.exit_code == 0, result.output
        assert [entry[0] for entry in replacer.asked] == ["agent-0"]
    else:
        assert isinstance(result.exception, rl.RollError)
        assert "data/pgdata (pod db-0)" in str(result.exception)
        assert "--accept-local-data-loss" in str(result.exception)
        assert replacer.asked == []
