"""`raya roll`: apply drift one node at a time, the way a careful operator would.

Each node's replacement is a list of actions (`actions`, printed by `--dry-run` and run by
`Roll`: one list, so what the operator is shown is what runs). The control planes come first
and alone (k3s' upgrade guide: servers first, then agents; the Kubernetes version skew policy
lets a kubelet be older than the API server, never newer); the next node starts only once the
last is back: registered from a new boot of its new server, Ready, on the pinned kubelet, and,
for a control plane, every node Ready. With several control planes each goes only while every
other one is Ready and a voting etcd member (`raya.operate.etcd`, so that etcd keeps its
quorum), is drained like an agent, and the next only once it votes again.

A node is cordoned and drained through the Kubernetes API (evictions, which honour
PodDisruptionBudgets; DaemonSet and mirror pods stay; emptyDir data goes with the node: what
`kubectl drain --ignore-daemonsets --delete-emptydir-data` does) until its pods are gone, not
merely accepted for eviction, and until its volumes are detached: no VolumeAttachment names it
and its `volumesAttached` is empty (Hetzner's CSI driver never re-reads an attachment, so one
that a server's deletion detached would stay `attached: true`). Attachments still naming the
node once its old server is gone are deleted.

Every replacement yields a new Node object: a kubelet that finds a Node of its name keeps it,
and its `spec.providerID` may not change once set (kubernetes `tryRegisterWithAPIServer`,
`ValidateNodeUpdate`), so a new server registering into the old Node would keep naming the
deleted server, and Hetzner's cloud controller, which finds servers by that ID, would fail
every load balancer sync. The old Node is deleted before the new kubelet registers: an agent's
once drained (its running kubelet registered when it started and does not again); a control
plane's among several once its server is gone (deleting it removes its etcd member, and a
running k3s, removed, would restart and register the old Node again); the sole control plane's
before its server (the API goes with it), k3s' etcd finalizer released: it would remove the
sole member, which etcd refuses, and keep the Node. The sole control plane is not drained:
pods on it using Hetzner Volumes stop with it, refused unless the operator accepts it.

A claim whose volume lives on the node's own disk (k3s' local-path) would be lost with the
server: a node with such a claim in use is not touched unless the operator accepts the loss.
A Hetzner Volume lives in one location, and its PersistentVolume's node affinity keeps its
pods there (`csi.hetzner.cloud/location`): a node is drained only if every such volume its
pods use has another node to go to (not one of its batch), Ready and schedulable for the pod,
unless the operator
accepts that they wait until the node is back.
Agents go in batches: at most `max_unavailable` of a pool unavailable at once (a count, or a
percentage of the pool rounded down and at least one, as a Deployment's `maxUnavailable` is
resolved: kubernetes `pkg/controller/deployment/util/deployment_util.go`, `ResolveFenceposts`),
counting the pool's nodes that already are (not Ready, cordoned, or not registered). A batch's
nodes take each action together: drained at once (their evictions each wait for their own
PodDisruptionBudget, so a budget that never allows stops that batch at the drain timeout,
before any of its servers is touched), their servers replaced by one targeted engine run.
Control planes stay one at a time. The first failure stops the roll and names every node:
rolled, in progress (what state the batch left each in), or not touched; a roll run again
takes the nodes that still drift, so it picks up where the last one stopped.
"""


from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raya.cloud.kubeconfig import reason
from raya.defaults import DRAIN_TIMEOUT, MAX_UNAVAILABLE, READY_TIMEOUT
from raya.errors import RayaError
from raya.model.progress import elapsed
from raya.model.unavailable import MaxUnavailable
from raya.nodes.addons import CSI_DRIVER, STORAGE_CLASS
from raya.operate import etcd

POLL = 5.0  # seconds between two looks at the API
CONTROL_PLANE = "control-plane"
# k3s' etcd member controller's finalizer on every node (k3s pkg/etcd/member_controller.go,
# wrangler OnRemove): it removes the node's etcd member, which etcd refuses for a sole member.
ETCD_FINALIZER = "wrangler.cattle.io/managed-etcd-controller"


class RollError(RayaError):
    """A node could not be rolled; the nodes after it were left untouched."""


# The actions of a node's replacement, each as the dry run prints it. `plan` orders them for
# each node and `Roll` runs them by name: what `--dry-run` shows is what a roll does.
QUORUM = "quorum"
LOCAL_DATA = "local data"
VOLUME_PLACES = "volume places"
VOLUME_DOWNTIME = "volume downtime"
CORDON = "cordon"
DRAIN = "drain"
DETACH = "detach"
DELETE_NODE = "delete node"
DELETE_SOLE_NODE = "delete sole node"
REPLACE = "replace"
DELETE_GONE_NODE = "delete gone node"
LEFTOVERS = "leftovers"
BACK = "back"
MEMBER = "member"
ALL_READY = "all ready"
# An autoscaled pool's node (raya.operate.autoscaler.PoolRoll): its server is the autoscaler's.
KEEP_FROM_AUTOSCALER = "keep from the autoscaler"
DELETE_SERVER = "delete server"
DELETE_NODE_OBJECT = "delete node object"
RESTART_AUTOSCALER = "restart autoscaler"
NEW_SERVERS = "new servers"
ACTIONS = {
    QUORUM: "check that every other control plane is Ready and a voting etcd member",
    LOCAL_DATA: "check that no pod on it uses a local-path claim (or --accept-local-data-loss)",
    VOLUME_PLACES: "check that each Hetzner Volume its pods use has another Ready, schedulable "
    "node where the volume is (or --accept-volume-downtime)",
    VOLUME_DOWNTIME: "check that no pod on it uses a Hetzner Volume claim "
    "(or --accept-volume-downtime)",
    CORDON: "cordon",
    DRAIN: "drain: evict its pods, wait until they are gone",
    DETACH: "wait until its volumes are detached (no VolumeAttachment, volumesAttached empty)",
    DELETE_NODE: "delete its Node object (its running kubelet does not register again)",
    DELETE_SOLE_NODE: "delete its Node object, releasing k3s' etcd finalizer (the sole etcd "
    "member stays)",
    REPLACE: "replace its server with its batch's in one targeted engine run (raya up --replace "
    "NODES, `pulumi up --target` their servers `--target-dependents`: shut down, wait until "
    "off, delete, create)",
    DELETE_GONE_NODE: "delete its Node object, its old server gone, before the new one registers "
    "(k3s removes its etcd member)",
    LEFTOVERS: "delete the VolumeAttachments left for the old server",
    BACK: "wait until the new server registers a new Node (a new boot, the new server's "
    "provider ID), Ready on the pinned k3s",
    MEMBER: "wait until it is a voting etcd member again",
    ALL_READY: "wait until every node is Ready",
    KEEP_FROM_AUTOSCALER: "annotate it cluster-autoscaler.kubernetes.io/scale-down-disabled, "
    "so that the autoscaler's own scale-down never picks it meanwhile (refused if the "
    "autoscaler is deleting it already)",
    DELETE_SERVER: "delete its server through Hetzner's API with its batch's, wait until gone",
    DELETE_NODE_OBJECT: "delete its Node object (its server is gone)",
    RESTART_AUTOSCALER: "restart the cluster autoscaler (its Hetzner provider counts its node "
    "group's servers at start only), wait until it runs again",
    NEW_SERVERS: "wait until the autoscaler has brought the pool back (at least its min, no "
    "pod left pending), every server of it registered Ready on the pinned k3s, from the "
    "newest snapshot",
}


# Actions on the node's object: none for a node that never registered.
ON_THE_NODE = frozenset(
    {
        CORDON, DRAIN, DETACH, DELETE_NODE, DELETE_SOLE_NODE, DELETE_GONE_NODE,
        KEEP_FROM_AUTOSCALER, DELETE_NODE_OBJECT,
    }
)  # fmt: skip


@dataclass(frozen=True)
class Step:
    node: str
    actions: tuple[str, ...]

    def describe(self) -> list[str]:
        """The node, then its actions in order, numbered."""
        return [
            f"{self.node}:",
            *(f"  {i}. {ACTIONS[action]}" for i, action in enumerate(self.actions, 1)),
        ]


def is_control_plane(name: str) -> bool:
    """`control-plane` and `control-plane-<k>` (raya.model.fleet)."""
    return name == CONTROL_PLANE or name.startswith(f"{CONTROL_PLANE}-")


def actions(node: str, control_planes: int) -> tuple[str, ...]:
    """What replacing `node` takes, in order, in a fleet of `control_planes` control planes.

    The old Node object goes before a kubelet can register into it and keep its provider ID
    (a kubelet keeps a Node it finds; the provider ID may not change once set). An agent's goes
    once it is drained and its volumes detached: its kubelet registered when it started and
    does not again. A control plane among several is drained like an agent, but its Node goes
    only once its server is gone: deleting it removes its etcd member (k3s), and a running
    k3s, removed, restarts and registers the old Node again. The sole control plane cannot be
    drained (its API goes with it): it refuses pods on Hetzner Volumes unless accepted, and
    its Node goes before its server (the API goes with the server); k3s' finalizer, which
    would remove the sole etcd member and cannot, is released."""
    if not is_control_plane(node):
        return (
            LOCAL_DATA, VOLUME_PLACES, CORDON, DRAIN, DETACH, DELETE_NODE, REPLACE, LEFTOVERS,
            BACK,
        )  # fmt: skip
    if control_planes > 1:
        return (
            QUORUM, LOCAL_DATA, VOLUME_PLACES, CORDON, DRAIN, DETACH, REPLACE, DELETE_GONE_NODE,
            LEFTOVERS, BACK, MEMBER, ALL_READY,
        )  # fmt: skip
    return (
        LOCAL_DATA, VOLUME_DOWNTIME, DELETE_SOLE_NODE, REPLACE, BACK, LEFTOVERS, ALL_READY,
    )  # fmt: skip


def plan(nodes: Sequence[str], wanted: Sequence[str], drifting: Sequence[str]) -> list[Step]:
    """The steps: `wanted` nodes, or else the `drifting` ones; the control planes first, one at
    a time in their order, then the agents in fleet order (`nodes`' order, the whole fleet).
    Unknown names are an error."""
    unknown = [name for name in wanted if name not in nodes]
    if unknown:
        raise RollError(
            f"no node {', '.join(unknown)} in the cluster; accepted: {', '.join(nodes)}"
        )
    chosen = [n for n in nodes if n in set(wanted or drifting)]
    # Stable: each part keeps `nodes`' order.
    ordered = sorted(chosen, key=lambda name: not is_control_plane(name))
    control_planes = sum(1 for name in nodes if is_control_plane(name))
    return [Step(node, actions(node, control_planes)) for node in ordered]


def pool_of(pools: Mapping[str, str], node: str) -> str:
    """The pool `node` belongs to for batching ("" for the list form's agents)."""
    return pools.get(node, "")


def pool_sizes(pools: Mapping[str, str], steps: Sequence[Step]) -> dict[str, int]:
    """Each pool's agents: those `pools` names, and any agent rolled that it does not."""
    names = {name for name in pools if not is_control_plane(name)}
    names |= {step.node for step in steps if not is_control_plane(step.node)}
    sizes: dict[str, int] = {}
    for name in names:
        sizes[pool_of(pools, name)] = sizes.get(pool_of(pools, name), 0) + 1
    return sizes


def next_batch(
    pending: Sequence[Step],
    pools: Mapping[str, str],
    limits: Mapping[str, int],
    unavailable: frozenset[str] = frozenset(),
) -> list[Step]:
    """The steps to run together next: a control plane alone (the first pending, in plan
    order); else the pending agents, in order, each taken while its pool's unavailable nodes
    (`unavailable`, and those taken) stay within the pool's limit. Empty when every pending
    pool is at its limit already."""
    if not pending:
        return []
    if is_control_plane(pending[0].node):
        return [pending[0]]
    down = set(unavailable)
    batch = []
    for step in pending:
        pool = pool_of(pools, step.node)
        if is_control_plane(step.node):
            continue
        in_pool = {name for name in down | {step.node} if pool_of(pools, name) == pool}
        if len(in_pool) <= limits[pool]:
            batch.append(step)
            down.add(step.node)
    return batch


def pool_limits(
    pools: Mapping[str, str],
    steps: Sequence[Step],
    max_unavailable: MaxUnavailable,
    own: Mapping[str, MaxUnavailable],
) -> dict[str, int]:
    """How many agents of each pool may be unavailable at once: its own `maxUnavailable`
    (`own`, from the fleet file) where it has one, else `max_unavailable` (the command's)."""
    return {
        pool: own.get(pool, max_unavailable).of(size)
        for pool, size in pool_sizes(pools, steps).items()
    }


def batches(
    steps: Sequence[Step],
    pools: Mapping[str, str],
    max_unavailable: MaxUnavailable,
    own: Mapping[str, MaxUnavailable] | None = None,
) -> list[list[Step]]:
    """The batches a roll of `steps` runs when no node is unavailable beforehand: what
    `--dry-run` prints (a roll counts the nodes unavailable before each batch)."""
    limits = pool_limits(pools, steps, max_unavailable, own or {})
    pending, planned = list(steps), []
    while pending:
        batch = next_batch(pending, pools, limits)
        planned.append(batch)
        pending = [step for step in pending if step not in batch]
    return planned


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
        self.storage = k8s.StorageV1Api(api)

    def _or_none(self, call: Callable[..., Any], *names: str) -> Any | None:
        """`call(*names)` (a read or a delete), or None when the object does not exist (404)."""
        try:
            return call(*names, _request_timeout=30)
        except self._k8s.ApiException as error:
            if error.status == 404:
                return None
            raise

    def node(self, name: str) -> Any | None:
        return self._or_none(self.core.read_node, name)

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
        return self._or_none(self.core.read_namespaced_persistent_volume_claim, name, namespace)

    def volume(self, name: str) -> Any | None:
        return self._or_none(self.core.read_persistent_volume, name)

    def delete_node(self, name: str) -> None:
        self._or_none(self.core.delete_node, name)

    def drop_finalizer(self, name: str, finalizer: str) -> None:
        """Take `finalizer` off the node, if it is being deleted and holds it."""
        node = self.node(name)
        if node is None or node.metadata.deletion_timestamp is None:
            return
        kept = [f for f in node.metadata.finalizers or [] if f != finalizer]
        if kept != list(node.metadata.finalizers or []):
            self.core.patch_node(name, {"metadata": {"finalizers": kept}}, _request_timeout=30)

    def attachments(self, node: str) -> list[Any]:
        """The VolumeAttachments naming `node`."""
        listed = self.storage.list_volume_attachment(_request_timeout=30)
        return [a for a in listed.items if a.spec.node_name == node]

    def delete_attachment(self, name: str) -> None:
        self._or_none(self.storage.delete_volume_attachment, name)

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


def provider_id(node: Any) -> str:
    return str(node.spec.provider_id or "")


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


def claims_on(kube: Kubernetes, node: str, on_its_disk: bool) -> list[str]:
    """The claims in use by pods on `node`, as `namespace/claim (pod name)`: those whose volume
    is on the node's own disk (`on_its_disk`), or else those on a Hetzner Volume. k3s'
    local-path provisioner makes a PersistentVolume with a `hostPath` (or `local`) source
    pinned to the node (rancher/local-path-provisioner, provisioner.go): replacing the server
    destroys it. A Hetzner Volume's source is `csi` (driver `csi.hetzner.cloud`): it moves."""
    found = []
    for pod, claim, volume in claimed_volumes(kube, kube.pods_on(node)):
        local = bool(volume.spec.host_path or volume.spec.local)
        if local if on_its_disk else on_hetzner(volume):
            found.append(f"{claim} (pod {pod.metadata.name})")
    return sorted(set(found))


def claimed_volumes(kube: Kubernetes, pods: Iterable[Any]) -> Iterator[tuple[Any, str, Any]]:
    """Each bound PersistentVolume the pods use through a claim: (pod, `namespace/claim`,
    volume)."""
    for pod in pods:
        for source in pod.spec.volumes or []:
            if source.persistent_volume_claim is None:
                continue
            namespace, name = pod.metadata.namespace, source.persistent_volume_claim.claim_name
            claim = kube.claim(namespace, name)
            bound = claim.spec.volume_name if claim is not None else None
            volume = kube.volume(bound) if bound else None
            if volume is not None:
                yield pod, f"{namespace}/{name}", volume


def on_hetzner(volume: Any) -> bool:
    """Whether `volume` is a Hetzner Volume (its source `csi`, driver `csi.hetzner.cloud`)."""
    return volume.spec.csi is not None and volume.spec.csi.driver == CSI_DRIVER


def _requirement_matches(requirement: Any, value: str | None) -> bool:
    """One node selector requirement against a node's value for its key (None: absent), as
    Kubernetes matches them (k8s.io/component-helpers `scheduling/corev1/nodeaffinity`, via
    `labels.Selector`: NotIn and DoesNotExist hold for an absent label, Gt and Lt compare
    integers and hold for no absent or non-integer one)."""
    operator, values = requirement.operator, requirement.values or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    try:
        number, bound = int(value or ""), int(values[0])
    except (ValueError, IndexError):
        return False
    return number > bound if operator == "Gt" else operator == "Lt" and number < bound


def volume_fits(volume: Any, node: Any) -> bool:
    """The PersistentVolume's required node affinity admits `node` (kubernetes
    `pkg/volume/util/util.go`, `CheckNodeAffinity`, which the scheduler's VolumeBinding
    plugin applies to a pod's bound claims): none admits every node; else any term whose
    every label expression and field (`metadata.name`) holds; a term with neither admits no
    node."""
    affinity = volume.spec.node_affinity
    required = affinity.required if affinity is not None else None
    if required is None:
        return True
    labels = node.metadata.labels or {}
    for term in required.node_selector_terms or []:
        expressions, fields = term.match_expressions or [], term.match_fields or []
        if not expressions and not fields:
            continue
        name = node.metadata.name
        by_label = all(_requirement_matches(e, labels.get(e.key)) for e in expressions)
        by_name = all(f.key == "metadata.name" and _requirement_matches(f, name) for f in fields)
        if by_label and by_name:
            return True
    return False


# What a cordon amounts to for the scheduler (its NodeUnschedulable plugin): a taint.
CORDONED = ("node.kubernetes.io/unschedulable", "", "NoSchedule")


def _tolerates(toleration: Any, key: str, value: str, effect: str) -> bool:
    """k8s.io/api `core/v1/toleration.go`, `ToleratesTaint`: the same effect (or none), the
    same key (or none, with Exists), and with Equal the same value."""
    if toleration.effect and toleration.effect != effect:
        return False
    if toleration.key and toleration.key != key:
        return False
    if toleration.operator == "Exists":
        return True
    return (toleration.operator or "Equal") == "Equal" and (toleration.value or "") == value


def takes(node: Any, pod: Any) -> bool:
    """Whether the scheduler could put `pod` on `node` as far as the node itself goes: Ready,
    and each of its NoSchedule and NoExecute taints tolerated (TaintToleration), a cordon
    counting as one (NodeUnschedulable). The pod's own node selector and affinity are not
    weighed."""
    taints = [(t.key, t.value or "", t.effect) for t in node.spec.taints or []]
    if node.spec.unschedulable:
        taints.append(CORDONED)
    tolerations = pod.spec.tolerations or []
    return ready(node) and all(
        any(_tolerates(toleration, *taint) for toleration in tolerations)
        for taint in taints
        if taint[2] in ("NoSchedule", "NoExecute")
    )


def _pinned_to(volume: Any) -> str:
    """Where a volume's node affinity pins it, for a person: `key in a, b` per expression."""
    affinity = volume.spec.node_affinity
    terms = affinity.required.node_selector_terms if affinity and affinity.required else []
    described = " or ".join(
        " and ".join(
            f"{e.key} {e.operator.lower()} {', '.join(e.values or [])}".rstrip()
            for e in [*(term.match_expressions or []), *(term.match_fields or [])]
        )
        for term in terms
    )
    return described or "any node"


def stranded(kube: Kubernetes, node: str, leaving: Collection[str] = ()) -> list[str]:
    """The claims on Hetzner Volumes used by pods a drain of `node` evicts that no other node
    (nor one of `leaving`) could take now, as `namespace/claim (pod name; pinned to ...)`:
    their pods would stay Pending until a node where their volume is can take them."""
    gone = {node, *leaving}
    others = [n for n in kube.nodes() if n.metadata.name not in gone]
    evicted = [pod for pod in kube.pods_on(node) if not stays(pod)]
    found = [
        f"{claim} (pod {pod.metadata.name}; pinned to {_pinned_to(volume)})"
        for pod, claim, volume in claimed_volumes(kube, evicted)
        if on_hetzner(volume)
        and not any(volume_fits(volume, other) and takes(other, pod) for other in others)
    ]
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
    # `--accept-volume-downtime`: replace the sole control plane under pods on Hetzner Volumes,
    # or drain a node whose pods' Hetzner Volumes no other node can take.
    accept_volume_downtime: bool = False

    def check_local_data(self, name: str) -> None:
        """Refuse to touch a node whose pods keep claims on its disk, unless accepted."""
        claims = claims_on(self.kube, name, on_its_disk=True)
        if not claims:
            return
        if not self.accept_local_loss:
            raise RollError(
                f"local-path claims on this node's disk would be lost with its server: "
                f"{', '.join(claims)}; move their data to {STORAGE_CLASS} claims, or pass "
                "--accept-local-data-loss"
            )
        self.say(f"{name}: losing the local-path claims, as accepted: {', '.join(claims)}")

    def check_volume_places(self, name: str, leaving: Collection[str] = ()) -> None:
        """Refuse to drain a node whose pods use Hetzner Volumes that no other node could
        take (another location's nodes cannot attach them; nor `leaving`, those drained
        with it), unless accepted."""
        claims = stranded(self.kube, name, leaving)
        if not claims:
            return
        if not self.accept_volume_downtime:
            raise RollError(
                "pods on Hetzner Volumes would have no node to go to while this node is "
                f"replaced (no other node where their volume is, Ready and schedulable): "
                f"{', '.join(claims)}; they would stay Pending until it is back. Add a node "
                "there first (a pool in that location), or pass --accept-volume-downtime"
            )
        self.say(f"{name}: down with it until it is back, as accepted: {', '.join(claims)}")

    def check_volume_downtime(self, name: str) -> None:
        """Refuse to replace an undrained node under pods on Hetzner Volumes, unless accepted:
        they are down until it is back, and their attachments to the old server are stale."""
        claims = claims_on(self.kube, name, on_its_disk=False)
        if not claims:
            return
        if not self.accept_volume_downtime:
            raise RollError(
                f"pods on the sole control plane use Hetzner Volume claims: {', '.join(claims)}; "
                "they stop with its server and their volumes are attached again only once it "
                "is back (the control plane is not drained: its API goes with it); run them on "
                "agents, or pass --accept-volume-downtime"
            )
        self.say(f"{name}: down with it until it is back, as accepted: {', '.join(claims)}")

    def drain(self, *names: str) -> None:
        """Evict each pod of the nodes `names` once (all at once: a batch's nodes drain
        together, each eviction under its own budget), then wait until every one is gone
        from the API: an eviction only starts the pod's graceful deletion."""
        deadline = self.clock.now() + self.drain_timeout
        while True:
            leaving = [
                pod for name in names for pod in self.kube.pods_on(name) if not stays(pod)
            ]
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
    replace: Callable[[Sequence[str]], None]  # replaces the nodes' servers in one engine run
    kubelet_version: str  # the k3s pin: what a rolled node must run
    ready_timeout: float = READY_TIMEOUT
    # The fleet's control planes, in order; with more than one, etcd's quorum is kept.
    control_planes: Sequence[str] = ()
    # Each node of the fleet: its pool ("" for the list form's agents), and how many of a
    # pool's agents may be unavailable at once.
    pools: Mapping[str, str] = field(default_factory=dict)
    max_unavailable: MaxUnavailable = field(
        default_factory=lambda: MaxUnavailable.parse(MAX_UNAVAILABLE)
    )
    # The pools with their own `maxUnavailable` in the fleet file: it wins over the above.
    own_limits: Mapping[str, MaxUnavailable] = field(default_factory=dict)
    # Per node of the batch running: the state its actions have brought it to, for the
    # error, and its Node object before the batch began (None: not registered).
    left: dict[str, str] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)

    def run(self, steps: Sequence[Step]) -> None:
        limits = pool_limits(self.pools, steps, self.max_unavailable, self.own_limits)
        pending, rolled = list(steps), list[str]()
        started = self.clock.now()
        while pending:
            names: list[str] = []
            self.left, self.before = {}, {}
            try:
                batch = self.batch(pending, limits)
                names = [step.node for step in batch]
                pending = [step for step in pending if step not in batch]
                self.say(
                    f"[{len(rolled)}/{len(steps)} rolled, {elapsed(self.clock.now() - started)}"
                    f" elapsed, {len(pending)} after these] {', '.join(names)}"
                )
                self.left = dict.fromkeys(names, "left as it was")
                self.before = {name: self.kube.node(name) for name in names}
                for action in batch[0].actions:  # a batch is agents alike, or one node
                    self.act(action, names)
            except Exception as error:  # ours, or the API client's, whatever their kind
                problem = (
                    str(error)
                    if isinstance(error, RayaError)
                    else f"the Kubernetes API failed: {reason(error)}"
                )
                raise RollError(self.stopped(names, problem, rolled, pending)) from None
            rolled += names

    def batch(self, pending: Sequence[Step], limits: Mapping[str, int]) -> list[Step]:
        """The next batch (`next_batch`), counting the agents unavailable now; refused when
        every pending pool is at its limit already."""
        if is_control_plane(pending[0].node):
            return [pending[0]]
        down = self.unavailable()
        found = next_batch(pending, self.pools, limits, down)
        if not found:
            pools = sorted({pool_of(self.pools, step.node) for step in pending})
            full = "; ".join(
                f"pool {pool or 'agents'} has "
                f"{', '.join(sorted(n for n in down if pool_of(self.pools, n) == pool))} "
                f"unavailable, at most {limits[pool]} may be ({self.limit_source(pool)})"
                for pool in pools
            )
            raise RollError(
                f"refused before touching them: {full}; a node cordoned, not Ready or not "
                "registered counts; "
                "bring them back (`raya status`), then roll again"
            )
        return found

    def limit_source(self, pool: str) -> str:
        """Where a pool's limit comes from, for the error."""
        own = self.own_limits.get(pool)
        if own is not None:
            return f"its maxUnavailable {own}"
        return f"--max-unavailable {self.max_unavailable}"

    def unavailable(self) -> frozenset[str]:
        """The agents unavailable now: registered but not Ready or cordoned, or of the fleet
        (`pools`) and not registered."""
        nodes = self.kube.nodes()
        seen = {node.metadata.name for node in nodes}
        down = {n.metadata.name for n in nodes if not ready(n) or n.spec.unschedulable}
        down |= {name for name in self.pools if name not in seen}
        return frozenset(name for name in down if not is_control_plane(name))

    def stopped(
        self, names: Sequence[str], problem: str, rolled: Sequence[str], pending: Sequence[Step]
    ) -> str:
        """The error: the batch's nodes and the problem, what each was left in, then the
        nodes rolled before and those not touched."""
        if len(names) == 1:
            parts = [f"{names[0]}: {problem}", self.left[names[0]]]
        elif names:
            parts = [f"{', '.join(names)}: {problem}"]
            parts += [f"{name}: {self.left[name]}" for name in names]
        else:
            parts = [problem]
        if rolled:
            parts.append(f"rolled: {', '.join(rolled)}")
        if pending:
            parts.append(f"not touched: {', '.join(step.node for step in pending)}")
        return "; ".join(parts)

    def act(self, action: str, names: Sequence[str]) -> None:
        """One action of `ACTIONS` on the batch's nodes: the drain and the replacement for
        all of them at once, the others node by node; those on a Node object only for the
        nodes that have one (a node that never registered is simply replaced)."""
        registered = [name for name in names if self.before[name] is not None]
        for name in names:
            if name not in registered and action == CORDON:
                self.say(f"{name}: not registered in the cluster, nothing to drain; replacing it")
        if action == DRAIN:
            if registered:
                self.drain_nodes(registered)
            return
        if action == REPLACE:
            self.replace_servers(names)
            return
        run: dict[str, Callable[[str], None]] = {
            QUORUM: self.check_quorum,
            LOCAL_DATA: self.check_local_data,
            VOLUME_PLACES: lambda node: self.check_volume_places(node, leaving=names),
            VOLUME_DOWNTIME: self.check_volume_downtime,
            CORDON: self.cordon,
            DETACH: self.wait_detached,
            DELETE_NODE: lambda node: self.delete_node(node, sole=False),
            DELETE_SOLE_NODE: lambda node: self.delete_node(node, sole=True),
            DELETE_GONE_NODE: self.delete_gone_node,
            LEFTOVERS: self.remove_leftovers,
            BACK: self.wait_ready,
            MEMBER: self.wait_voter,
            ALL_READY: self.wait_all_ready,
        }
        for name in registered if action in ON_THE_NODE else names:
            run[action](name)

    def cordon(self, name: str) -> None:
        self.kube.cordon(name, True)
        self.left[name] = f"left cordoned: `kubectl uncordon {name}`, or roll it again"
        self.say(f"{name}: cordoned")

    def drain_nodes(self, names: Sequence[str]) -> None:
        self.drain(*names)
        for name in names:
            self.say(f"{name}: drained")

    def replace_servers(self, names: Sequence[str]) -> None:
        # The replacement may stop before anything is deleted (a server that does not shut
        # down): the error says how far it went.
        for name in names:
            self.left[name] = (
                f"its replacement did not finish: see `raya status`, then `raya roll {name}`"
            )
        self.replace(names)
        for name in names:
            control_plane = is_control_plane(name)
            self.left[name] = (
                f"its server was replaced and the "
                f"{'control plane' if control_plane else 'node'} is not back"
                f"{' (no agent was touched)' if control_plane else ''}: see `raya status` "
                f"and the server's console, then `raya roll {name}` again"
            )

    def wait_voter(self, name: str) -> None:
        self.left[name] = (
            "its server was replaced and the control plane is back, but not as a voting etcd "
            "member (no agent was touched): see `raya status`"
        )
        self.wait_member(etcd.member(name, self.before[name]))

    def wait_detached(self, name: str) -> None:
        """Until no VolumeAttachment names the node and its `volumesAttached` is empty: the
        attach/detach controller detaches a volume once the kubelet no longer reports it in
        use, and Hetzner's CSI driver would not notice a detach it did not make (it never
        re-reads an attachment), so the server goes only once it has made them all."""
        deadline = self.clock.now() + self.drain_timeout
        while True:
            node = self.kube.node(name)
            listed = [a.spec.source.persistent_volume_name for a in self.kube.attachments(name)]
            status = [v.name for v in (node.status.volumes_attached or [])] if node else []
            if not listed and not status:
                self.say(f"{name}: no volume attached")
                return
            if self.clock.now() >= deadline:
                raise RollError(
                    f"volumes still attached after {self.drain_timeout:.0f} s: "
                    f"{', '.join(sorted(listed)) or ', '.join(sorted(status))}"
                )
            self.clock.sleep(POLL)

    def delete_node(self, name: str, sole: bool) -> None:
        """Delete the Node object and wait until it is gone. For the sole control plane, k3s'
        etcd finalizer cannot remove its member (etcd refuses to remove the last voter) and
        would keep the Node, into which the new kubelet would register: it is released."""
        self.kube.delete_node(name)
        deadline = self.clock.now() + self.ready_timeout
        while (node := self.kube.node(name)) is not None:
            if sole:
                self.kube.drop_finalizer(name, ETCD_FINALIZER)
            if self.clock.now() >= deadline:
                held = ", ".join(node.metadata.finalizers or []) or "nothing"
                raise RollError(
                    f"its Node object is still there {self.ready_timeout:.0f} s after its "
                    f"deletion (held by {held})"
                )
            self.clock.sleep(POLL)
        self.say(f"{name}: Node object deleted")
        self.left[name] = (
            f"its Node object is deleted and its server not yet replaced: `raya roll {name}` again"
        )

    def delete_gone_node(self, name: str) -> None:
        """The Node of a server that is gone, before the new server's kubelet registers."""
        node = self.kube.node(name)
        if node is not None and boot_id(node) != boot_id(self.before[name]):
            raise RollError(
                "its new server registered into the old Node object before raya could delete "
                f"it, and kept its provider ID: `kubectl delete node {name}`, then restart k3s "
                "on it (`sudo systemctl restart k3s`)"
            )
        self.delete_node(name, sole=False)

    def remove_leftovers(self, name: str) -> None:
        """Delete the VolumeAttachments still naming the node, its old server gone: the CSI
        driver never re-reads one that says attached (csi-driver#89), and a pod back on a node
        of that name would wait for a volume that is not there."""
        for attachment in self.kube.attachments(name):
            self.kube.delete_attachment(attachment.metadata.name)
            self.say(
                f"{name}: deleted the VolumeAttachment of "
                f"{attachment.spec.source.persistent_volume_name}, left for its old server"
            )

    def wait_all_ready(self, name: str) -> None:
        self.left[name] = "the control plane is back; no agent was touched: see `raya status`"
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
        self.say(f"{name}: the API answers; every node Ready")

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
        is the leader's word on the new server. A new member name is what a roll leads to: k3s
        removes the member of a deleted Node (raya's deletion of the old Node, or Hetzner's
        cloud controller's), so the new server finds itself removed, sets the datastore on its
        volume aside and joins again through `server:`; as a voter it holds the cluster's data
        from its peers, which kept their quorum (`check_quorum`)."""
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

    def wait_ready(self, name: str) -> None:
        """Until the node has registered from a new boot (its boot ID changed) with the new
        server's provider ID (not the old one's), Ready, on the pinned kubelet: a replaced
        server's old node stays Ready for a while after it is gone."""
        before = self.before[name]
        old_boot = boot_id(before) if before is not None else ""
        old_provider = provider_id(before) if before is not None else ""
        deadline = self.clock.now() + self.ready_timeout
        seen = "not registered"
        while True:
            try:
                node = self.kube.node(name)
            except Exception as error:  # the API is down while the control plane is replaced
                node, seen = None, f"API: {reason(error)}"
            if node is not None:
                version = node.status.node_info.kubelet_version
                fresh = boot_id(node) != old_boot
                moved = not old_provider or provider_id(node) != old_provider
                if fresh and moved and ready(node) and version == self.kubelet_version:
                    self.say(
                        f"{name}: back from a new boot, Ready on {version}, "
                        f"provider ID {provider_id(node)}"
                    )
                    return
                seen = (
                    f"{'Ready' if ready(node) else 'not Ready'} {version}, "
                    f"{'a new boot' if fresh else 'the old boot'}"
                    f"{'' if moved else f', the old server provider ID {old_provider}'}"
                )
            if self.clock.now() >= deadline:
                raise RollError(
                    f"not back from a new boot Ready on {self.kubelet_version} after "
                    f"{self.ready_timeout:.0f} s (last seen: {seen})"
                )
            self.clock.sleep(POLL)
