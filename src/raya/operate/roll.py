"""`raya roll`: apply drift one node at a time, the way a careful operator would.

The control plane comes first and alone (k3s' upgrade guide: servers first, then agents; the
Kubernetes version skew policy lets a kubelet be older than the API server, never newer): its
server is replaced (its volume keeps the datastore), and nothing else starts until the API
answers again, trusted through the cluster's CA, the control plane is back from a new boot,
Ready, and every node is Ready. With several control planes they go one at a time, each only
while every other one is Ready and a voting etcd member (`raya.operate.etcd`: so that etcd
keeps its quorum while it is gone), and the next only once it is back as a voting member:
the same member from its volume, or a new one when k3s removed its member while it was gone
(then its data comes from its peers, and the roll says so).
Then each agent is cordoned, drained through the Kubernetes API
(evictions, which honour PodDisruptionBudgets; DaemonSet and mirror pods stay; emptyDir data
goes with the node: what `kubectl drain --ignore-daemonsets --delete-emptydir-data` does) until
its pods are gone, not merely accepted for eviction (an evicted pod stays Terminating for its
grace period), its server replaced with the current inputs, and uncordoned once the node is
back: registered with a new boot ID, Ready, on the pinned kubelet. The first failure stops the
roll and says what state it left the node in.

Claims on Hetzner Volumes move with their pods (the drain lets the CSI driver detach them).
A claim whose volume lives on the node's own disk (k3s' local-path) would be lost with the
server: a node with such a claim in use is not touched unless the operator accepts the loss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from raya.cloud.kubeconfig import reason
from raya.defaults import DRAIN_TIMEOUT, READY_TIMEOUT
from raya.errors import RayaError
from raya.nodes.addons import STORAGE_CLASS
from raya.operate import etcd

POLL = 5.0  # seconds between two looks at the API
CONTROL_PLANE = "control-plane"


class RollError(RayaError):
    """A node could not be rolled; the nodes after it were left untouched."""


@dataclass(frozen=True)
class Step:
    node: str
    drain: bool  # agents are drained; the control plane is replaced alone

    def describe(self) -> str:
        if self.drain:
            return (
                f"{self.node}: cordon, drain, shut down (wait until off), replace, wait until "
                "back from a new boot, uncordon"
            )
        return (
            f"{self.node}: shut down (wait until off), replace onto its volume, wait until back "
            "from a new boot"
        )


def is_control_plane(name: str) -> bool:
    """`control-plane` and `control-plane-<k>` (raya.model.fleet)."""
    return name == CONTROL_PLANE or name.startswith(f"{CONTROL_PLANE}-")


def plan(nodes: Sequence[str], wanted: Sequence[str], drifting: Sequence[str]) -> list[Step]:
    """The steps: `wanted` nodes, or else the `drifting` ones; the control planes first, one at
    a time in their order, then the agents in fleet order (`nodes`' order). Unknown names are
    an error."""
    unknown = [name for name in wanted if name not in nodes]
    if unknown:
        raise RollError(
            f"no node {', '.join(unknown)} in the cluster; accepted: {', '.join(nodes)}"
        )
    chosen = [n for n in nodes if n in set(wanted or drifting)]
    # Stable: each part keeps `nodes`' order.
    ordered = sorted(chosen, key=lambda name: not is_control_plane(name))
    return [Step(node, drain=not is_control_plane(node)) for node in ordered]


@dataclass
class Clock:
    """Time as the roll sees it: injectable so tests do not wait."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


class Kubernetes:
    """What the roll asks of the API, through the official client."""

    def __init__(self, api: Any) -> None:
        from kubernetes import client as k8s

        self._k8s = k8s
        self.core = k8s.CoreV1Api(api)

    def _read(self, read: Callable[..., Any], *names: str) -> Any | None:
        """`read(*names)`, or None when the object does not exist (404)."""
        try:
            return read(*names, _request_timeout=30)
        except self._k8s.ApiException as error:
            if error.status == 404:
                return None
            raise

    def node(self, name: str) -> Any | None:
        return self._read(self.core.read_node, name)

    def nodes(self) -> list[Any]:
        return list(self.core.list_node(_request_timeout=30).items)

    def cordon(self, name: str, unschedulable: bool) -> None:
        self.core.patch_node(name, {"spec": {"unschedulable": unschedulable}}, _request_timeout=30)

    def pods_on(self, name: str) -> list[Any]:
        listed = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={name}", _request_timeout=30
        )
        return list(listed.items)

    def claim(self, namespace: str, name: str) -> Any | None:
        return self._read(self.core.read_namespaced_persistent_volume_claim, name, namespace)

    def volume(self, name: str) -> Any | None:
        return self._read(self.core.read_persistent_volume, name)

    def evict(self, pod: Any) -> bool:
        """Ask for the pod's eviction; False when a disruption budget refuses it for now."""
        body = self._k8s.V1Eviction(
            metadata=self._k8s.V1ObjectMeta(
                name=pod.metadata.name, namespace=pod.metadata.namespace
            ),
            delete_options=self._k8s.V1DeleteOptions(),
        )
        try:
            self.core.create_namespaced_pod_eviction(
                pod.metadata.name, pod.metadata.namespace, body, _request_timeout=30
            )
        except self._k8s.ApiException as error:
            if error.status == 429:
                return False
            if error.status == 404:  # gone already
                return True
            raise
        return True


def ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def boot_id(node: Any) -> str:
    return str(node.status.node_info.boot_id or "")


def ref(pod: Any) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def terminating(pod: Any) -> bool:
    """Accepted for deletion: the API keeps it listed until its grace period ends."""
    return pod.metadata.deletion_timestamp is not None


def stays(pod: Any) -> bool:
    """Pods a drain leaves: DaemonSet pods (their controller would put them back) and mirror
    pods (the kubelet's static pods), and pods already finished."""
    owners = pod.metadata.owner_references or []
    annotations = pod.metadata.annotations or {}
    return (
        any(owner.kind == "DaemonSet" and owner.controller for owner in owners)
        or "kubernetes.io/config.mirror" in annotations
        or (pod.status is not None and pod.status.phase in ("Succeeded", "Failed"))
    )


def local_claims(kube: Kubernetes, node: str) -> list[str]:
    """The claims in use by pods on `node` whose volume is on that node's disk, as
    `namespace/claim (pod name)`: what replacing its server destroys. k3s' local-path
    provisioner makes such volumes: a PersistentVolume with a `hostPath` (or `local`) source
    pinned to the node (rancher/local-path-provisioner, provisioner.go); a Hetzner Volume's
    source is `csi`, and moves."""
    found = []
    for pod in kube.pods_on(node):
        for source in pod.spec.volumes or []:
            if source.persistent_volume_claim is None:
                continue
            namespace, name = pod.metadata.namespace, source.persistent_volume_claim.claim_name
            claim = kube.claim(namespace, name)
            bound = claim.spec.volume_name if claim is not None else None
            volume = kube.volume(bound) if bound else None
            if volume is not None and (volume.spec.host_path or volume.spec.local):
                found.append(f"{namespace}/{name} (pod {pod.metadata.name})")
    return sorted(set(found))


def managed(pod: Any) -> bool:
    return any(owner.controller for owner in pod.metadata.owner_references or [])


@dataclass(kw_only=True)
class Drain:
    """Cordon and drain through the API: what the roll does before replacing an agent, and
    `raya up` before deleting a node (raya.operate.remove)."""

    kube: Kubernetes
    say: Callable[[str], None]
    clock: Clock
    drain_timeout: float = DRAIN_TIMEOUT
    # `--accept-local-data-loss`: touch nodes whose pods use local-path claims.
    accept_local_loss: bool = False

    def check_local_data(self, name: str) -> None:
        """Refuse to touch a node whose pods keep claims on its disk, unless accepted."""
        claims = local_claims(self.kube, name)
        if not claims:
            return
        if not self.accept_local_loss:
            raise RollError(
                f"local-path claims on this node's disk would be lost with its server: "
                f"{', '.join(claims)}; move their data to {STORAGE_CLASS} claims, or pass "
                "--accept-local-data-loss"
            )
        self.say(f"{name}: losing the local-path claims, as accepted: {', '.join(claims)}")

    def drain(self, name: str) -> None:
        """Evict each pod once, then wait until every one is gone from the API: an eviction
        only starts the pod's graceful deletion."""
        deadline = self.clock.now() + self.drain_timeout
        while True:
            leaving = [pod for pod in self.kube.pods_on(name) if not stays(pod)]
            if not leaving:
                return
            bare = [ref(p) for p in leaving if not managed(p) and not terminating(p)]
            if bare:
                # What `kubectl drain` refuses without --force: nothing would bring them back.
                raise RollError(
                    f"pods not managed by a controller would be lost: {', '.join(bare)}; "
                    "delete them or give them a controller, then try again"
                )
            refused = [ref(p) for p in leaving if not terminating(p) and not self.kube.evict(p)]
            if self.clock.now() >= deadline:
                going = [ref(p) for p in leaving if ref(p) not in refused]
                parts = []
                if going:
                    parts.append(f"still terminating: {', '.join(going)}")
                if refused:
                    parts.append(f"refused by a PodDisruptionBudget: {', '.join(refused)}")
                raise RollError(
                    f"drain timed out after {self.drain_timeout:.0f} s; {'; '.join(parts)}"
                )
            self.clock.sleep(POLL)


@dataclass(kw_only=True)
class Roll(Drain):
    replace: Callable[[str], None]  # replaces node's server with the current inputs
    kubelet_version: str  # the k3s pin: what a rolled node must run
    ready_timeout: float = READY_TIMEOUT
    # The fleet's control planes, in order; with more than one, etcd's quorum is kept.
    control_planes: Sequence[str] = ()
    left: str = ""  # the state the current step has brought its node to, for the error

    def run(self, steps: Sequence[Step]) -> None:
        for number, step in enumerate(steps, 1):
            self.say(f"[{number}/{len(steps)}] {step.describe()}")
            self.left = "left as it was"
            try:
                self.check_local_data(step.node)
                if step.drain:
                    self.agent(step.node)
                else:
                    self.control_plane(step.node)
            except Exception as error:  # ours, or the API client's, whatever their kind
                problem = (
                    str(error)
                    if isinstance(error, RayaError)
                    else f"the Kubernetes API failed: {reason(error)}"
                )
                left = [s.node for s in steps[number:]]
                rest = f"; not touched: {', '.join(left)}" if left else ""
                raise RollError(f"{step.node}: {problem}; {self.left}{rest}") from None

    def agent(self, name: str) -> None:
        before = self.kube.node(name)
        if before is None:
            self.say(f"{name}: not registered in the cluster, nothing to drain; replacing it")
        else:
            self.kube.cordon(name, True)
            self.left = f"left cordoned: `kubectl uncordon {name}`, or roll it again"
            self.say(f"{name}: cordoned")
            self.drain(name)
            self.say(f"{name}: drained; replacing its server")
        self.left = (
            f"its server was replaced and the node is not back{' (cordoned)' if before else ''}: "
            f"see `raya status` and the server's console, then `raya roll {name}` again"
        )
        self.replace(name)
        self.wait_ready(name, previous_boot=boot_id(before) if before is not None else "")
        self.kube.cordon(name, False)
        self.say(f"{name}: back from a new boot, Ready on {self.kubelet_version}, uncordoned")

    def control_plane(self, name: str) -> None:
        several = len(self.control_planes) > 1
        if several:
            self.check_quorum(name)
        before = self.kube.node(name)
        self.left = (
            "its server was replaced and the control plane is not back (no agent was touched): "
            f"see `raya status` and the server's console, then `raya roll {name}` again"
        )
        self.replace(name)
        self.wait_ready(name, previous_boot=boot_id(before) if before is not None else "")
        if several:
            self.left = (
                "its server was replaced and the control plane is back, but not as a voting etcd "
                "member (no agent was touched): see `raya status`"
            )
            self.wait_member(etcd.member(name, before))
        self.left = "the control plane is back; no agent was touched: see `raya status`"
        deadline = self.clock.now() + self.ready_timeout
        while True:
            not_ready = sorted(n.metadata.name for n in self.kube.nodes() if not ready(n))
            if not not_ready:
                break
            if self.clock.now() >= deadline:
                raise RollError(
                    f"nodes not Ready after {self.ready_timeout:.0f} s: {', '.join(not_ready)}"
                )
            self.clock.sleep(POLL)
        self.say(f"{name}: the API answers; back from a new boot; every node Ready")

    def check_quorum(self, name: str) -> None:
        """Refuse to replace `name` unless every other etcd member is a voter on a Ready node:
        then etcd keeps its quorum while `name` is gone. `name` itself may be in any state:
        replacing a member that is down or not voting loses nothing more."""
        problem = etcd.replacement_problem(
            etcd.members(self.kube.nodes(), self.control_planes), name
        )
        if problem:
            raise RollError(f"refused before any change: {problem}")

    def wait_member(self, before: etcd.Member) -> None:
        """Until the node's `EtcdIsVoter` condition is True again. This runs once the node is
        back from a new boot: its server was gone far longer than the 15 s between two writes
        of the condition by k3s' etcd leader, which marked it Unhealthy meanwhile, so a True
        is the leader's word on the new server. A new member name is no reason to stop: k3s
        set the datastore on the volume aside (its member was removed while the server was
        gone: Hetzner's cloud controller deletes the node of a deleted server, and k3s the
        member of a deleted node) and joined it again through `server:`; as a voter it holds
        the cluster's data from its peers, which kept their quorum (`check_quorum`)."""
        name = before.node
        deadline = self.clock.now() + self.ready_timeout
        while True:
            try:
                found = etcd.member(name, self.kube.node(name))
            except Exception as error:  # the API may be unreachable for a moment
                found = etcd.Member(name, "unknown", False, "", f"API: {reason(error)}")
            if found.voter:
                break
            if self.clock.now() >= deadline:
                raise RollError(
                    f"not back as a voting etcd member after {self.ready_timeout:.0f} s "
                    f"(last seen: {found.describe()})"
                )
            self.clock.sleep(POLL)
        if before.name and found.name != before.name:
            self.say(
                f"{name}: rejoined etcd as a new member ({before.name} -> {found.name}): its "
                "member was removed while its server was gone, so k3s set the datastore on its "
                "volume aside; it is a voter with the cluster's data from its peers"
            )
        else:
            self.say(f"{name}: back as the voting etcd member {found.name}")

    def wait_ready(self, name: str, previous_boot: str) -> None:
        """Until the node has registered from a new boot (its boot ID changed), Ready, on the
        pinned kubelet: a replaced server's old node stays Ready for a while after it is gone."""
        deadline = self.clock.now() + self.ready_timeout
        seen = "not registered"
        while True:
            try:
                node = self.kube.node(name)
            except Exception as error:  # the API is down while the control plane is replaced
                node, seen = None, f"API: {reason(error)}"
            if node is not None:
                version = node.status.node_info.kubelet_version
                fresh = boot_id(node) != previous_boot
                if fresh and ready(node) and version == self.kubelet_version:
                    return
                seen = (
                    f"{'Ready' if ready(node) else 'not Ready'} {version}, "
                    f"{'a new boot' if fresh else 'the old boot'}"
                )
            if self.clock.now() >= deadline:
                raise RollError(
                    f"not back from a new boot Ready on {self.kubelet_version} after "
                    f"{self.ready_timeout:.0f} s (last seen: {seen})"
                )
            self.clock.sleep(POLL)
