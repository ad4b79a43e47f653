"""Delivering the cluster autoscaler's Secret and HelmChart (the stack output `autoscaler`) to
the cluster, by server-side apply over the Kubernetes API with the stack's kubeconfig; and
`raya roll` of an autoscaled pool (`PoolRoll`), whose servers the autoscaler made.

Not through the control plane's config like the other add-ons: the Secret holds every
autoscaled pool's whole node config (about 14 KB each), which a control plane's `user_data`
(under 32 KiB, nearly full with the add-ons) cannot carry, and a control plane's config is
fixed when its server is created while pools come and go. Once applied, k3s' helm-controller
installs the chart, as for the add-ons.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from raya.errors import DeployError
from raya.nodes.addons import NAMESPACE
from raya.nodes.autoscaler import (
    AUTOSCALER,
    CLUSTER_CONFIG_KEY,
    CONFIG_DIGEST,
    NODE_GROUP_LABEL,
    SECRET,
    config_digest,
    node_config_digests,
)
from raya.operate import roll as rl
from raya.operate.roll import Clock, RollError

FIELD_MANAGER = "raya"
APPLY = "application/apply-patch+yaml"  # server-side apply
# How long `raya up` waits for an API that is still starting (a first deployment), and how
# often it asks.
API_WAIT = 600.0
API_RETRY = 10.0
API_TIMEOUT = 15.0
# The Secret's annotation, per node group, of its node config's digest and the moment `raya
# up` first applied that config: `<digest> <RFC 3339 UTC>` (`stamps`).
NODE_CONFIG = "raya/node-config."
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
EARLIEST = datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _cluster_config(secret_document: Mapping[str, Any]) -> dict[str, Any]:
    """The cluster config of the autoscaler's Secret as `raya up` builds it (`stringData`) or
    the API stores it (`data`, base64 of that)."""
    text = (secret_document.get("stringData") or {}).get(CLUSTER_CONFIG_KEY)
    if text is None:
        stored = (secret_document.get("data") or {}).get(CLUSTER_CONFIG_KEY) or ""
        text = base64.b64decode(stored).decode()
    config: dict[str, Any] = json.loads(base64.b64decode(text)) if text else {}
    return config


def stamps(
    digests: Mapping[str, str], existing: Mapping[str, str], now: datetime.datetime
) -> dict[str, str]:
    """The Secret's `NODE_CONFIG` annotations: each node group's digest, with the moment its
    config was first applied: kept from `existing` (the Secret's annotations in the cluster)
    while the digest is the same, `now` when it changed. A server the autoscaler created
    before that moment was made from an older config."""
    found = {}
    for group, digest in digests.items():
        key = NODE_CONFIG + group
        if len(key.partition("/")[2]) > 63:
            raise DeployError(
                f"the cluster autoscaler's node group {group} is too long for the annotation "
                f"{key} (a name of at most 63 characters); use a shorter cluster or pool name"
            )
        was, _, since = existing.get(key, "").partition(" ")
        found[key] = f"{digest} {since if was == digest and since else now.strftime(TIME_FORMAT)}"
    return found


def applied_since(annotations: Mapping[str, str], group: str) -> tuple[str, datetime.datetime]:
    """The digest and first application (UTC) `stamps` recorded for `group`, or ("", min)."""
    digest, _, since = annotations.get(NODE_CONFIG + group, "").partition(" ")
    try:
        moment = datetime.datetime.strptime(since, TIME_FORMAT).replace(tzinfo=datetime.UTC)
    except ValueError:
        return "", EARLIEST
    return digest, moment


def _stamped(api: Any, document: dict[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """The Secret `document` with its `NODE_CONFIG` annotations (`stamps`), read against the
    Secret in the cluster; any other document as it is."""
    if document.get("kind") != "Secret":
        return document
    from kubernetes import client as k8s

    meta = document["metadata"]
    try:
        current: Any = k8s.CoreV1Api(api).read_namespaced_secret(
            meta["name"], meta["namespace"], _request_timeout=API_TIMEOUT
        )
        existing = dict(current.metadata.annotations or {})
    except k8s.ApiException as error:
        if error.status != 404:
            raise
        existing = {}
    digests = node_config_digests(_cluster_config(document))
    annotations = {**(meta.get("annotations") or {}), **stamps(digests, existing, now)}
    return {**document, "metadata": {**meta, "annotations": annotations}}


def _patch(api: Any, document: dict[str, Any]) -> None:
    """One server-side apply of `document`, a Secret or a HelmChart."""
    from kubernetes import client as k8s

    version, kind, meta = document.get("apiVersion"), document.get("kind"), document["metadata"]
    options: dict[str, Any] = {
        "field_manager": FIELD_MANAGER,
        "force": True,
        "_content_type": APPLY,
        "_request_timeout": API_TIMEOUT,
    }
    if (version, kind) == ("v1", "Secret"):
        k8s.CoreV1Api(api).patch_namespaced_secret(
            meta["name"], meta["namespace"], document, **options
        )
    elif (version, kind) == ("helm.cattle.io/v1", "HelmChart"):
        group, _, group_version = str(version).partition("/")
        k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
            group, group_version, meta["namespace"], "helmcharts", meta["name"], document,
            **options,
        )  # fmt: skip
    else:
        raise DeployError(
            f"the autoscaler's manifests hold a {kind} ({version}); accepted: Secret (v1), "
            "HelmChart (helm.cattle.io/v1)"
        )


def apply(
    api: Any,
    manifests: str,
    clock: Clock,
    say: Callable[[str], None],
    *,
    wait: float = API_WAIT,
    now: Callable[[], datetime.datetime] = _utc_now,
) -> list[str]:
    """Server-side apply of each object of `manifests` through `api` (the official client's
    ApiClient), owned by field manager `raya` and forced (raya's values win over an edit by
    hand); the API is asked again every `API_RETRY` s for up to `wait` s while it does not
    answer. The Secret is stamped with each node group's config digest and since when it is
    applied (`stamps`, at `now`). Returns `<Kind> <namespace>/<name>` of each, in order.
    Never shows an object."""
    from kubernetes.client.exceptions import ApiException

    from raya.cloud.kubeconfig import reason

    applied = []
    for document in yaml.safe_load_all(manifests):
        meta = document["metadata"]
        what = f"{document['kind']} {meta['namespace']}/{meta['name']}"
        deadline = clock.now() + wait
        while True:
            try:
                _patch(api, _stamped(api, document, now()))
                break
            except ApiException as error:
                if error.status is not None and error.status < 500 and error.status != 429:
                    raise DeployError(
                        f"cluster autoscaler: the API refused {what}: {error.status} "
                        f"{error.reason}"
                    ) from None
                problem = f"{error.status} {error.reason}"
            except Exception as error:  # urllib3 and the client raise many kinds
                problem = reason(error)
            if clock.now() >= deadline:
                raise DeployError(
                    f"cluster autoscaler: {what} not applied, the API did not answer for "
                    f"{wait:g} s ({problem}); the deployment itself is done: run `raya up` "
                    "again once the control plane is up"
                )
            say(f"cluster autoscaler: the API does not answer yet ({problem}); retrying")
            clock.sleep(API_RETRY)
        applied.append(what)
    return applied


# --- `raya roll` of an autoscaled pool -----------------------------------------------------------

# cluster-autoscaler `core/scaledown/eligibility/eligibility.go`, `ScaleDownDisabledKey`: a
# node annotated so ("true") is never a scale-down candidate.
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
# cluster-autoscaler `utils/taints/taints.go`, `ToBeDeletedTaint`: the taint the autoscaler
# puts on a node it has started to delete (`actuation.IsNodeBeingDeleted`).
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
# What `kubectl rollout restart` sets (kubectl `pkg/polymorphichelpers/objectrestarter.go`).
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
DEPLOYMENT = AUTOSCALER.workloads[0].partition("/")[2]
ACTIONS = (
    rl.LOCAL_DATA, rl.VOLUME_PLACES, rl.KEEP_FROM_AUTOSCALER, rl.CORDON, rl.DRAIN, rl.DETACH,
    rl.DELETE_SERVER, rl.DELETE_NODE_OBJECT, rl.LEFTOVERS, rl.RESTART_AUTOSCALER,
    rl.NEW_SERVERS,
)  # fmt: skip


@dataclass(frozen=True)
class GroupServer:
    """A server of a node group, as Hetzner lists it."""

    name: str
    image: int  # the image it was created from (0: none left)
    architecture: str  # Hetzner's: x86, arm
    created: datetime.datetime


def outdated(
    server: GroupServer, newest: Mapping[str, int], since: datetime.datetime
) -> str:
    """Why `server` is old ("" if it is not): not created from the newest snapshot for its
    architecture (`newest`, by Hetzner architecture), or created before its node group's
    current config was first applied (`since`)."""
    current = newest.get(server.architecture, 0)
    if server.image != current:
        return f"image {server.image or 'none'}, the newest snapshot is {current or 'none'}"
    if server.created < since:
        return (
            f"created {server.created.strftime(TIME_FORMAT)}, before its config was applied "
            f"({since.strftime(TIME_FORMAT)})"
        )
    return ""


def rollout_problem(deployment: Any, generation: int = 0) -> str:
    """Why the Deployment has not rolled out ("" when it has), as `kubectl rollout status`
    decides (kubectl `pkg/polymorphichelpers/rollout_status.go`, `DeploymentStatusViewer`):
    its spec observed, every replica updated and available, no old one left; `generation` a
    spec generation it must have observed too."""
    status, meta = deployment.status, deployment.metadata
    wanted = deployment.spec.replicas if deployment.spec.replicas is not None else 1
    if (status.observed_generation or 0) < max(meta.generation or 0, generation):
        return "its spec change is not observed yet"
    for condition in status.conditions or []:
        if condition.type == "Progressing" and condition.reason == "ProgressDeadlineExceeded":
            return f"its rollout exceeded its progress deadline ({condition.message})"
    updated, replicas = status.updated_replicas or 0, status.replicas or 0
    available = status.available_replicas or 0
    if updated < wanted:
        return f"{updated} of {wanted} replicas updated"
    if replicas > updated:
        return f"{replicas - updated} old replicas pending termination"
    if available < updated:
        return f"{available} of {updated} updated replicas available"
    return ""


def newest_snapshots(client: Any, selector: str, architectures: Sequence[str]) -> dict[str, int]:
    """The newest available snapshot of each architecture carrying `selector`'s labels: the
    one the provider's `findImage` picks (type snapshot, status available, the server type's
    architecture, `created:desc`, the first)."""
    found = {}
    for architecture in sorted(set(architectures)):
        # The status is filtered here: hcloud-python's `get_list` sends `per_page` as the
        # `status` filter (hcloud/images/client.py, `params["status"] = per_page`).
        listed = client.images.get_all(
            type=["snapshot"], architecture=[architecture], label_selector=selector
        )
        images = [image for image in listed if image.status == "available"]
        if images:
            newest = max(images, key=lambda image: image.created)
            found[architecture] = int(newest.id)
    return found


def group_servers(client: Any, group: str) -> list[Any]:
    """The node group's servers: the provider labels each `hcloud/node-group=<group>` (over
    the group's `serverLabels`: `hetzner_node_group.go`, `createServer`), by which it lists
    a group's servers itself; the group's name holds the cluster's."""
    return list(client.servers.get_all(label_selector=f"{NODE_GROUP_LABEL}={group}"))


def _facts(server: Any) -> GroupServer:
    image = server.image
    return GroupServer(
        name=str(server.name),
        image=int(image.id) if image is not None and image.id is not None else 0,
        architecture=str(server.server_type.architecture),
        created=server.created,
    )


def _no_replacement(names: Sequence[str]) -> None:
    raise RollError(
        f"{', '.join(names)}: an autoscaled node's server is the autoscaler's to create"
    )


@dataclass(kw_only=True)
class PoolRoll(rl.Roll):
    """Replace the old servers of an autoscaled pool, in batches, keeping its
    PodDisruptionBudgets. Decided from the cluster autoscaler's source (kubernetes/
    autoscaler, tag cluster-autoscaler-1.35.0, and as below at cluster-autoscaler-1.36.1,
    the release raya runs):

    - raya cannot re-create such a server: the Hetzner provider makes them
      (`cloudprovider/hetzner/hetzner_node_group.go`, `createServer`: a random name, the
      group's `cloudInit`, the newest snapshot matching the group's `imagesForArch`, the
      group's `serverLabels` and `hcloud/node-group`) when the core scales the group up: for
      pods left pending, or, with `--enforce-node-group-min-size` (raya sets it), to bring
      it back to its min.
    - The provider keeps the group's target size in memory: it counts the group's servers
      when it starts (`hetzner_cloud_provider.go`, `BuildHetzner`) and again only after its
      own `IncreaseSize`/`DeleteNodes` (`resetTargetSize`); `Refresh` does nothing. A server
      deleted behind its back still counts in the target: the min is not enforced (the
      target is not under it) until `fixNodeGroupSize` lowers the target after
      `--max-node-provision-time` (15 min); 1.35.0 also took the missing node for one still
      coming up (`clusterstate.go`, `GetUpcomingNodes`: target minus registered) and made
      none for the pods it displaced, which 1.36 does only while a scale-up of its own is
      active. So after deleting a batch's servers, and once Hetzner has, raya restarts the
      autoscaler (as `kubectl rollout restart` does), which counts them again, and waits for
      the pool to come back.
    - Letting the autoscaler delete the old nodes instead (cordon, drain, and wait for its
      scale-down of empty nodes) cannot roll a pool at its min: the core never scales a
      group below it and `DeleteNodes` refuses (`size decrease is too large`).
    - Its own scale-down must not pick a node raya is handling: a node annotated
      `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"` is never a candidate
      (`core/scaledown/eligibility/eligibility.go`, `HasNoScaleDownAnnotation`), and one it
      has begun to delete carries its `ToBeDeletedByClusterAutoscaler` taint: raya
      annotates each node of a batch first, and refuses one so tainted (it is going anyway).
    - Pods leave only through the eviction API, under their PodDisruptionBudgets (a 429
      is waited on, a pod is never deleted directly): the drain of `raya.operate.roll`.

    A server is old when it was not created from the newest snapshot labelled for the pins
    for its architecture, or was created before its node group's current config was first
    applied by `raya up` (the Secret's `raya/node-config.<group>` annotation: `stamps`);
    the server labels raya gives a group (`managed_by`, `role`, `pool`) are the same for
    every config, so the config a server was made from is known by that moment only.
    Limit: the outgoing autoscaler keeps its old config until the new one has started
    (seconds after `raya up`); a server it makes in that time looks current.

    Refused, before anything is touched, while the Secret in the cluster is not the one the
    stack's last `raya up` computed (its node configs, and the snapshots for the pins now),
    or the autoscaler's Deployment has not rolled out with it."""

    replace: Callable[[Sequence[str]], None] = _no_replacement  # raya makes no such server
    hetzner: Any  # hcloud Client
    api: Any  # the Kubernetes ApiClient
    pool_name: str
    group: str
    min_size: int
    stack_secret: Mapping[str, Any]  # the Secret of the stack's `autoscaler` output
    selector: str  # the snapshots' label selector for the pins now
    # The roll's own view, filled by `prepare`: the newest snapshot per architecture, the
    # group's servers by name, and since when its config is applied.
    newest: dict[str, int] = field(default_factory=dict)
    servers: dict[str, Any] = field(default_factory=dict)
    since: datetime.datetime = EARLIEST

    def _hetzner(self, call: Callable[[], Any], what: str) -> Any:
        """`call()` on Hetzner's API; its failure a RollError naming `what` was asked."""
        import requests
        from hcloud import HCloudException

        try:
            return call()
        except (HCloudException, requests.RequestException) as error:
            raise RollError(f"Hetzner API: {what}: {error}") from None

    def _group(self) -> dict[str, Any]:
        """The group's servers by name."""
        listed = self._hetzner(
            lambda: group_servers(self.hetzner, self.group), f"listing node group {self.group}"
        )
        return {str(server.name): server for server in listed}

    def _apps(self) -> Any:
        from kubernetes import client as k8s

        return k8s.AppsV1Api(self.api)

    def _deployment(self) -> Any | None:
        from kubernetes import client as k8s

        try:
            return self._apps().read_namespaced_deployment(
                DEPLOYMENT, NAMESPACE, _request_timeout=API_TIMEOUT
            )
        except k8s.ApiException as error:
            if error.status == 404:
                return None
            raise

    def check_applied(self) -> None:
        """Refuse unless the cluster runs the autoscaler with the config `raya up` would
        apply now: its Secret's node config for this group and its snapshots' selector are
        the stack's, stamped, and its Deployment has rolled out on that config."""
        from kubernetes import client as k8s

        fix = "run `raya up` (it applies the autoscaler's config), then roll again"
        wanted = _cluster_config(self.stack_secret)
        if set((wanted.get("imagesForArch") or {}).values()) != {self.selector}:
            raise RollError(
                f"pool {self.pool_name}: the stack's autoscaler config selects other snapshots "
                f"than the pins now (image/*.pin changed since the last `raya up`): {fix}"
            )
        try:
            stored: Any = k8s.CoreV1Api(self.api).read_namespaced_secret(
                SECRET, NAMESPACE, _request_timeout=API_TIMEOUT
            )
        except k8s.ApiException as error:
            if error.status != 404:
                raise
            raise RollError(
                f"pool {self.pool_name}: the cluster autoscaler's Secret {NAMESPACE}/{SECRET} "
                f"is not in the cluster: {fix}"
            ) from None
        applied = _cluster_config({"data": stored.data or {}})
        digest = node_config_digests(wanted).get(self.group)
        if digest is None:
            raise RollError(
                f"pool {self.pool_name}: the stack's autoscaler config has no node group "
                f"{self.group}: {fix}"
            )
        stamped, self.since = applied_since(stored.metadata.annotations or {}, self.group)
        if node_config_digests(applied).get(self.group) != digest or stamped != digest or (
            applied.get("imagesForArch") != wanted.get("imagesForArch")
        ):
            raise RollError(
                f"pool {self.pool_name}: the cluster autoscaler's Secret in the cluster is not "
                f"the one the last `raya up` computed (node group {self.group}): {fix}"
            )
        deployment = self._deployment()
        if deployment is None:
            raise RollError(
                f"pool {self.pool_name}: no cluster autoscaler Deployment "
                f"{NAMESPACE}/{DEPLOYMENT}: k3s' helm-controller has not installed the chart; "
                "see `raya status`, or run `raya up`"
            )
        template = deployment.spec.template.metadata.annotations or {}
        if template.get(CONFIG_DIGEST) != config_digest(wanted):
            raise RollError(
                f"pool {self.pool_name}: the cluster autoscaler does not run with the config "
                "`raya up` applied yet (its pod template has another "
                f"{CONFIG_DIGEST}): wait for k3s' helm-controller to upgrade it "
                "(`raya status`), or run `raya up`, then roll again"
            )
        problem = rollout_problem(deployment)
        if problem:
            raise RollError(
                f"pool {self.pool_name}: the cluster autoscaler is not ready ({problem}): see "
                f"`kubectl -n {NAMESPACE} rollout status deployment/{DEPLOYMENT}`, then roll "
                "again"
            )

    def prepare(self) -> list[rl.Step]:
        """The steps: one per old server of the group (`outdated`), in name order; what is
        current is said and left alone. `check_applied` first."""
        self.check_applied()
        listed = self._group()
        facts = {name: _facts(server) for name, server in listed.items()}
        self.newest = self._hetzner(
            lambda: newest_snapshots(
                self.hetzner, self.selector, [f.architecture for f in facts.values()]
            ),
            f"listing the snapshots labelled {self.selector}",
        )
        self.servers = listed
        self.pools = dict.fromkeys(listed, self.pool_name)
        old = {name: outdated(f, self.newest, self.since) for name, f in facts.items()}
        for name in sorted(old):
            if old[name]:
                self.say(f"{name}: old ({old[name]})")
        current = sorted(name for name, why in old.items() if not why)
        if current:
            self.say(
                f"pool {self.pool_name}: current, left alone: {', '.join(current)} (the newest "
                "snapshot, created after its config was applied)"
            )
        return [rl.Step(name, ACTIONS) for name in sorted(old) if old[name]]

    def act(self, action: str, names: Sequence[str]) -> None:
        """The autoscaled pool's own actions; the others as `Roll` does them."""
        registered = [name for name in names if self.before[name] is not None]
        if action == rl.KEEP_FROM_AUTOSCALER:
            for name in registered:
                self.keep_from_autoscaler(name)
        elif action == rl.DELETE_SERVER:
            self.delete_servers(names)
        elif action == rl.DELETE_NODE_OBJECT:
            for name in registered:
                self.delete_node(name, sole=False)
        elif action == rl.RESTART_AUTOSCALER:
            self.restart_autoscaler()
        elif action == rl.NEW_SERVERS:
            self.wait_new_servers(names)
        else:
            super().act(action, names)

    def keep_from_autoscaler(self, name: str) -> None:
        """Annotate the node scale-down-disabled, then refuse it if the autoscaler has begun
        to delete it (its taint): the two would delete the same server."""
        self.kube.core.patch_node(
            name, {"metadata": {"annotations": {SCALE_DOWN_DISABLED: "true"}}},
            _request_timeout=API_TIMEOUT,
        )  # fmt: skip
        self.left[name] = (
            f"left annotated {SCALE_DOWN_DISABLED}: roll it again, or `kubectl annotate node "
            f"{name} {SCALE_DOWN_DISABLED}-`"
        )
        node = self.kube.node(name)
        taints = [t.key for t in (node.spec.taints or [])] if node is not None else []
        if TO_BE_DELETED in taints:
            raise RollError(
                "the cluster autoscaler is deleting it already (its "
                f"{TO_BE_DELETED} taint): roll again once it is gone"
            )
        self.say(f"{name}: kept from the autoscaler's scale-down ({SCALE_DOWN_DISABLED})")

    def wait_until(self, problem: Callable[[], str], failure: str) -> None:
        """Until `problem()` is empty, asked every POLL seconds; past `ready_timeout`, a
        RollError of `failure` formatted with the timeout and the last problem."""
        deadline = self.clock.now() + self.ready_timeout
        while found := problem():
            if self.clock.now() >= deadline:
                raise RollError(failure.format(timeout=f"{self.ready_timeout:.0f}", problem=found))
            self.clock.sleep(rl.POLL)

    def delete_servers(self, names: Sequence[str]) -> None:
        """Delete the batch's servers through Hetzner's API and wait until they are gone."""
        import requests
        from hcloud import APIException, HCloudException

        for name in names:
            self.left[name] = (
                "its server's deletion was asked: see `raya status`, then roll again"
            )
            try:
                self.hetzner.servers.delete(self.servers[name])
            except APIException as error:
                if error.code != "not_found":  # else gone already
                    raise RollError(f"Hetzner API: deleting server {name}: {error}") from None
            except (HCloudException, requests.RequestException) as error:
                raise RollError(f"Hetzner API: deleting server {name}: {error}") from None
        self.wait_until(
            lambda: ", ".join(sorted(set(names) & set(self._group()))),
            "servers still there {timeout} s after their deletion was asked: {problem}",
        )
        for name in names:
            self.left[name] = (
                "its server is deleted; the autoscaler has not brought the pool back: see "
                "`raya status`, then roll again"
            )
            self.say(f"{name}: server deleted")

    def restart_autoscaler(self) -> None:
        """Restart the autoscaler's pods (a new `restartedAt` in its pod template) and wait
        until the rollout is done: its provider then counts the group's servers again."""
        moment = _utc_now().isoformat()  # to the microsecond: each restart its own
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: moment}}}}}
        patched = self._apps().patch_namespaced_deployment(
            DEPLOYMENT, NAMESPACE, patch, _request_timeout=API_TIMEOUT
        )
        generation = int(patched.metadata.generation or 0)

        def problem() -> str:
            deployment = self._deployment()
            if deployment is None:
                return "its Deployment is gone"
            return rollout_problem(deployment, generation)

        self.wait_until(
            problem, "the cluster autoscaler not back {timeout} s after its restart ({problem})"
        )
        self.say(f"pool {self.pool_name}: the cluster autoscaler restarted, counting its servers")

    def pending_pods(self) -> list[str]:
        """Pods no node was found for yet (no `spec.nodeName`), not being deleted."""
        listed: Any = self.kube.core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName=", _request_timeout=API_TIMEOUT
        )
        return sorted(
            rl.ref(pod) for pod in listed.items
            if not pod.spec.node_name and not rl.terminating(pod)
        )  # fmt: skip

    def wait_new_servers(self, names: Sequence[str]) -> None:
        """Until the group has at least its min servers, each a Ready Node (a new one on the
        pinned kubelet), and no pod waits for a node; then every server the autoscaler made
        since must be current (`outdated`), or the roll stops."""
        deadline = self.clock.now() + self.ready_timeout
        while True:
            listed = self._group()
            nodes = {node.metadata.name: node for node in self.kube.nodes()}
            # The pool's other old servers keep their kubelet until their turn.
            waiting = sorted(
                name for name in listed
                if name not in nodes or not rl.ready(nodes[name]) or (
                    name not in self.servers
                    and nodes[name].status.node_info.kubelet_version != self.kubelet_version
                )
            )  # fmt: skip
            pending = self.pending_pods()
            if len(listed) >= self.min_size and not waiting and not pending:
                break
            if self.clock.now() >= deadline:
                parts = [f"{len(listed)} servers, min {self.min_size}"]
                if waiting:
                    parts.append(
                        f"not Ready (a new one on {self.kubelet_version}): {', '.join(waiting)}"
                    )
                if pending:
                    parts.append(f"pods pending: {', '.join(pending)}")
                raise RollError(
                    f"pool {self.pool_name} not back {self.ready_timeout:.0f} s after the "
                    f"autoscaler's restart ({'; '.join(parts)}): see `raya status` and the "
                    f"autoscaler's log (`kubectl -n {NAMESPACE} logs deployment/{DEPLOYMENT}`)"
                )
            self.clock.sleep(rl.POLL)
        made = sorted(set(listed) - set(self.servers))
        for name in made:
            why = outdated(_facts(listed[name]), self.newest, self.since)
            if why:
                raise RollError(
                    f"the autoscaler made {name} from an old config or image ({why}): see its "
                    "config (`raya status`), run `raya up`, then roll again"
                )
        self.servers = {**{n: s for n, s in self.servers.items() if n in listed}, **listed}
        self.pools = dict.fromkeys(listed, self.pool_name)
        for name in names:
            self.left[name] = "rolled"
        self.say(
            f"pool {self.pool_name}: {len(listed)} servers, every one Ready on "
            f"{self.kubelet_version}; new from the newest snapshot: {', '.join(made) or 'none'}"
        )
