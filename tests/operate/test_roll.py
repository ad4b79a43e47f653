"""`raya roll` against a Kubernetes API over real TLS on 127.0.0.1 (the cluster's own CAs), a
stand-in for `raya up --replace` that records what it was asked and plays the new VM, and a
clock that never waits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from raya.cli import app
from raya.cloud import deploy
from raya.cloud.kubeconfig import api_client
from raya.nodes.identity import CertificateAuthority
from raya.operate import roll as rl
from tests.cloud.program import fakes
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import PINS, provider_mocks, run

PIN = PINS.k3s.version
OLD = "v1.30.0+k3s1"
NODES = ["control-plane", "agent-0", "agent-1", "agent-2"]


class Clock(rl.Clock):
    """Time that only moves when the roll sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        super().__init__(now=lambda: self.t, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture(scope="module")
def deployed() -> Run:
    return run(provider_mocks())


@pytest.fixture
def cluster() -> fakes.Cluster:
    state = fakes.Cluster(nodes={name: fakes.node(name, OLD) for name in NODES})
    state.pods = [
        fakes.pod("web-1", "default", "agent-0"),
        fakes.pod("db-0", "data", "agent-0", owner="StatefulSet"),
        fakes.pod("flannel-x", "kube-system", "agent-0", owner="DaemonSet"),
        fakes.pod(
            "static",
            "kube-system",
            "agent-0",
            owner=None,
            annotations={"kubernetes.io/config.mirror": "x"},
        ),
        fakes.pod("web-2", "default", "agent-1"),
    ]
    return state


@pytest.fixture
def api(deployed: Run, cluster: fakes.Cluster, tmp_path: Path) -> Iterator[str]:
    server_ca = CertificateAuthority(
        deployed.resources["server-ca"].outputs["certPem"],
        deployed.resources["server-ca-key"].outputs["privateKeyPem"],
    )
    client_ca = deployed.resources["client-ca"].outputs["certPem"]
    name = "cp.raya.example.com"
    with fakes.kubernetes_api(cluster, server_ca, client_ca, tmp_path, name) as url:
        yield url


class Replacer:
    """What `raya up --replace NODE` does, seen from the API: a new VM boots, on the pin."""

    def __init__(self, cluster: fakes.Cluster, never_ready: frozenset[str] = frozenset()) -> None:
        self.cluster, self.never_ready = cluster, never_ready
        self.asked: list[tuple[str, list[str]]] = []

    def __call__(self, name: str) -> None:
        with self.cluster.lock:
            self.asked.append((name, self._pods_left(name)))
            node = self.cluster.nodes[name]
            node["status"]["nodeInfo"]["bootID"] = str(uuid.uuid4())  # a new VM, a new boot
            node["status"]["nodeInfo"]["kubeletVersion"] = PIN
            ready = name not in self.never_ready
            node["status"]["conditions"] = [{"type": "Ready", "status": str(ready)}]

    def _pods_left(self, name: str) -> list[str]:
        return sorted(
            p["metadata"]["name"] for p in self.cluster.pods if p["spec"]["nodeName"] == name
        )


def roller(deployed: Run, url: str, replace: Any, **kwargs: Any) -> rl.Roll:
    kube = rl.Kubernetes(api_client(deployed.outputs["kubeconfig"], server=url))
    lines: list[str] = []
    return rl.Roll(
        kube=kube, replace=replace, kubelet_version=PIN, say=lines.append, clock=Clock(), **kwargs
    )


def test_plan_puts_agents_first_in_fleet_order_and_the_control_plane_last() -> None:
    steps = rl.plan(NODES, [], ["control-plane", "agent-2", "agent-0"])
    assert [(s.node, s.drain) for s in steps] == [
        ("agent-0", True),
        ("agent-2", True),
        ("control-plane", False),
    ]
    assert [s.node for s in rl.plan(NODES, ["agent-1"], ["agent-0"])] == ["agent-1"]
    assert rl.plan(NODES, [], []) == []
    with pytest.raises(rl.RollError, match="no node agent-7 in the cluster; accepted: control"):
        rl.plan(NODES, ["agent-7"], [])


def test_an_agent_is_cordoned_drained_replaced_and_uncordoned(
    deployed: Run, cluster: fakes.Cluster, api: str
) -> None:
    replace = Replacer(cluster)
    cluster.refusals["db-0"] = 2  # its PodDisruptionBudget refuses twice, then allows
    roller(deployed, api, replace).run(rl.plan(NODES, ["agent-0"], []))
    # Replaced once, after its pods left: DaemonSet and mirror pods stay, as with kubectl drain.
    assert replace.asked == [("agent-0", ["flannel-x", "static"])]
    evictions = [path for method, path in cluster.log if method == "POST"]
    assert evictions.count("/api/v1/namespaces/data/pods/db-0/eviction") == 3
    assert "/api/v1/namespaces/default/pods/web-1/eviction" in evictions
    assert not any("flannel" in path or "static" in path for path in evictions)
    patches = [path for method, path in cluster.log if method == "PATCH"]
    assert patches == ["/api/v1/nodes/agent-0", "/api/v1/nodes/agent-0"]  # cordon, uncordon
    assert cluster.nodes["agent-0"]["spec"]["unschedulable"] is False
    assert [p["metadata"]["name"] for p in cluster.pods if p["spec"]["nodeName"] == "agent-1"] == [
        "web-2"
    ]  # another node's pods are not touched


def test_a_budget_that_never_allows_times_out_and_stops_the_roll(
    deployed: Run, cluster: fakes.Cluster, api: str
) -> None:
    replace = Replacer(cluster)
    cluster.refusals["db-0"] = 10**6
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, drain_timeout=30).run(
            rl.plan(NODES, [], ["agent-0", "agent-1"])
        )
    message = str(caught.value)
    assert message.startswith("agent-0: drain timed out after 30 s; pods left: data/db-0")
    assert "PodDisruptionBudget" in message and message.endswith("not touched: agent-1")
    assert replace.asked == []  # never replaced with pods still on it
    assert cluster.nodes["agent-0"]["spec"]["unschedulable"] is True  # left cordoned, said so
    assert cluster.nodes["agent-1"]["spec"]["unschedulable"] is False


def test_a_bare_pod_stops_the_drain(deployed: Run, cluster: fakes.Cluster, api: str) -> None:
    cluster.pods.append(fakes.pod("scratch", "default", "agent-0", owner=None))
    with pytest.raises(rl.RollError, match="would be lost: default/scratch"):
        roller(deployed, api, Replacer(cluster)).run(rl.plan(NODES, ["agent-0"], []))
    assert not any(path.endswith("/scratch/eviction") for _, path in cluster.log)


def test_a_node_that_never_comes_back_stops_the_roll_and_names_it(
    deployed: Run, cluster: fakes.Cluster, api: str
) -> None:
    replace = Replacer(cluster, never_ready=frozenset({"agent-1"}))
    steps = rl.plan(NODES, [], ["agent-1", "agent-2", "control-plane"])
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace, ready_timeout=60).run(steps)
    assert str(caught.value) == (
        f"agent-1: not back Ready on {PIN} after 60 s (last seen: NotReady {PIN}); "
        "not touched: agent-2, control-plane"
    )
    assert [name for name, _ in replace.asked] == ["agent-1"]
    assert cluster.nodes["agent-2"]["spec"]["unschedulable"] is False


def test_the_control_plane_is_replaced_alone_then_every_node_must_be_ready(
    deployed: Run, cluster: fakes.Cluster, api: str
) -> None:
    replace = Replacer(cluster)
    roller(deployed, api, replace).run(rl.plan(NODES, ["control-plane"], []))
    assert [name for name, _ in replace.asked] == ["control-plane"]
    assert not [path for method, path in cluster.log if method in ("PATCH", "POST")]
    cluster.nodes["agent-2"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    with pytest.raises(rl.RollError, match="control-plane: nodes not Ready after 60 s: agent-2"):
        roller(deployed, api, Replacer(cluster), ready_timeout=60).run(
            rl.plan(NODES, ["control-plane"], [])
        )



def test_the_command_rolls_the_drifting_nodes_through_raya_up(
    deployed: Run,
    cluster: fakes.Cluster,
    api: str,
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
            replacer(node)
        return SimpleNamespace(drift={"agent-2": ("image",), "control-plane": ("users",)})

    monkeypatch.setattr(deploy, "run", fake_run)
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setattr(
        "raya.commands.operate.kube_api_client", lambda text: api_client(text, server=api)
    )
    monkeypatch.setattr(rl, "POLL", 0.01)
    dry = CliRunner().invoke(app, ["roll", "--root", str(project), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert runs == [("preview", ())]
    assert dry.stdout.splitlines() == [
        "agent-2: cordon, drain, replace, wait until Ready, uncordon",
        "control-plane: replace (its volume keeps the datastore), wait for the API",
    ]
    result = CliRunner().invoke(app, ["roll", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert runs[1:] == [("preview", ()), ("up", ("agent-2",)), ("up", ("control-plane",))]
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
    cluster: fakes.Cluster, pod: str, claim: str, volume: dict[str, Any] | None
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
    deployed: Run, cluster: fakes.Cluster, api: str
) -> None:
    use_claim(cluster, "db-0", "pgdata", local_path_volume("pvc-1a2b", "agent-0"))
    replace = Replacer(cluster)
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, api, replace).run(rl.plan(NODES, [], ["agent-0", "agent-1"]))
    assert str(caught.value) == (
        "agent-0: local-path claims on this node's disk would be lost with its server: "
        "data/pgdata (pod db-0); move their data to hcloud-volumes claims, or roll with "
        "--accept-local-data-loss; not touched: agent-1"
    )
    assert replace.asked == []
    # Checked before anything changes: not even cordoned.
    assert not [path for method, path in cluster.log if method in ("PATCH", "POST")]


def test_accepting_the_loss_rolls_the_node_and_says_so(
    deployed: Run, cluster: fakes.Cluster, api: str
) -> None:
    use_claim(cluster, "db-0", "pgdata", local_path_volume("pvc-1a2b", "agent-0"))
    replace = Replacer(cluster)
    roll = roller(deployed, api, replace, accept_local_loss=True)
    lines: list[str] = []
    roll.say = lines.append
    roll.run(rl.plan(NODES, ["agent-0"], []))
    assert [name for name, _ in replace.asked] == ["agent-0"]
    assert "agent-0: losing the local-path claims, as accepted: data/pgdata (pod db-0)" in lines


def test_a_hetzner_volume_claim_moves_with_its_pod(
    deployed: Run, cluster: fakes.Cluster, api: str
) -> None:
    use_claim(cluster, "db-0", "pgdata", hetzner_volume("pvc-9f8e"))
    use_claim(cluster, "web-1", "cache", None)  # not bound yet: nothing on the node's disk
    replace = Replacer(cluster)
    roller(deployed, api, replace).run(rl.plan(NODES, ["agent-0"], []))
    # Evicted like any pod, the node replaced once it left (the CSI driver detaches).
    assert replace.asked == [("agent-0", ["flannel-x", "static"])]
    evictions = [path for method, path in cluster.log if method == "POST"]
    assert "/api/v1/namespaces/data/pods/db-0/eviction" in evictions
    assert ("GET", "/api/v1/persistentvolumes/pvc-9f8e") in cluster.log


@pytest.mark.parametrize("accept", [False, True])
def test_the_command_takes_the_flag(
    deployed: Run,
    cluster: fakes.Cluster,
    api: str,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    accept: bool,
) -> None:
    use_claim(cluster, "db-0", "pgdata", local_path_volume("pvc-1a2b", "agent-0"))
    replacer = Replacer(cluster)

    def fake_run(action: str, root: Path, stack: str, on_output: Any, **kwargs: Any) -> Any:
        if action == "up":
            replacer(*kwargs["replace"])
        return SimpleNamespace(drift={})

    monkeypatch.setattr(deploy, "run", fake_run)
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setattr(
        "raya.commands.operate.kube_api_client", lambda text: api_client(text, server=api)
    )
    monkeypatch.setattr(rl, "POLL", 0.01)
    flag = ["--accept-local-data-loss"] if accept else []
    result = CliRunner().invoke(app, ["roll", "agent-0", "--root", str(project), *flag])
    if accept:
        assert result.exit_code == 0, result.output
        assert [name for name, _ in replacer.asked] == ["agent-0"]
    else:
        assert isinstance(result.exception, rl.RollError)
        assert "data/pgdata (pod db-0)" in str(result.exception)
        assert "--accept-local-data-loss" in str(result.exception)
        assert replacer.asked == []
