"""A Kubernetes API stand-in over real TLS on 127.0.0.1, written from what the real API server,
its controllers and the kubelet do, not from what raya expects:

- TLS: the serving certificate comes from the cluster's server CA and names k3s' `tls-san` and
  127.0.0.1 (k3s' dynamiclistener makes it valid a year); a client certificate is asked for, not
  required, as kube-apiserver does (`tls.RequestClientCert`, k8s.io/apiserver
  `pkg/server/secure_serving.go`), and a request without one is 401 because k3s runs the API
  server with `anonymous-auth=false` (k3s `pkg/daemons/control/server.go`, `apiServer`). One
  difference: Python verifies a certificate it is given, so one from another CA fails the
  handshake here, where kube-apiserver's x509 authenticator answers 401. Refused either way;
  TLS is capped at 1.2 here so that the client sees why (`unknown ca`) during the handshake,
  where TLS 1.3 sends that alert after the client has finished.
- Eviction (kubernetes/kubernetes `pkg/registry/core/pod/storage/eviction.go`,
  `EvictionREST.Create`, and https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/):
  a pod that is Pending, finished or already terminating is deleted without consulting a
  budget (`canIgnorePDB`); more than one matching PodDisruptionBudget is a 500; with one,
  `checkAndDecrement` answers 429 ("Cannot evict pod as it would violate the pod's disruption
  budget.") while its `status.disruptionsAllowed` is 0, else decrements it, records the pod in
  `status.disruptedPods`, and deletes the pod gracefully. An unready pod is deleted without
  decrementing when the budget is met anyway.
- PodDisruptionBudget status, as the disruption controller computes it
  (`pkg/controller/disruption/disruption.go`, `getExpectedPodCount`, `countHealthyPods`):
  healthy pods are the selector's Ready pods not being deleted and not in `disruptedPods` (an
  entry lasts `DeletionTimeout`, 2 min); `minAvailable` as a number is measured against the
  matching pods, a percentage or `maxUnavailable` against the controllers' scale (rounded up);
  `disruptionsAllowed = max(0, currentHealthy - desiredHealthy)`. The controller recomputes it
  before every request here, which a real one does within moments.
- Graceful deletion (`pkg/registry/core/pod/strategy.go`, `CheckGracefulDelete`;
  k8s.io/apiserver `pkg/registry/rest/delete.go`, `BeforeDelete`;
  https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination): DELETE
  (and an eviction) takes `gracePeriodSeconds` or else the pod's
  `terminationGracePeriodSeconds` (default 30, `SetDefaults_PodSpec`); an unscheduled or
  finished pod, or a grace of 0, goes at once; otherwise the pod stays listed, Terminating,
  with `deletionTimestamp = now + grace`, and a second DELETE may only shorten it. The
  kubelet removes it when the grace ends (the worst case: containers that ignore SIGTERM), and
  only while the node's machine runs: on a node that is gone, a pod stays Terminating.
- Scheduling (kubernetes `pkg/scheduler/framework/plugins`): a pending pod fits a node whose
  labels hold every `spec.nodeSelector` entry and one of the terms of its required node
  affinity (`nodeaffinity`, `GetRequiredNodeAffinity`: terms or-ed, a term's expressions
  and-ed, an empty term matching nothing; `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`
  on labels, `In`/`NotIn` on `metadata.name` for `matchFields`), and whose `NoSchedule` and
  `NoExecute` taints its tolerations tolerate (`tainttoleration`,
  `FindMatchingUntoleratedTaint`; k8s.io/api `core/v1/toleration.go`, `ToleratesTaint`: an
  empty effect matches every effect, an empty key with `Exists` every key, `Exists` any
  value, `Equal` or no operator the same value). A pod it cannot place keeps no node and gets
  the condition `PodScheduled` `False`, reason `Unschedulable` (`schedule_one.go`,
  `handleSchedulingFailure`; k8s.io/api `PodReasonUnschedulable`); a bound one `PodScheduled`
  `True` (`pkg/registry/core/pod/storage/storage.go`, `assignPod`). A pod with
  `spec.schedulingGates` is not scheduled while it has any: its condition is `PodScheduled`
  `False`, reason `SchedulingGated` (`pkg/registry/core/pod/strategy.go`,
  `applySchedulingGatedCondition`; k8s.io/api `PodReasonSchedulingGated`).
- Listing pods with a `fieldSelector` (k8s.io/apimachinery `pkg/fields/selector.go`,
  `ParseSelector`: requirements joined by `,`, each `field=value`, `field==value` or
  `field!=value`, a value possibly empty; kubernetes `pkg/apis/core/v1/conversion.go`: a pod's
  selectable fields are `metadata.name`, `metadata.namespace`, `spec.nodeName`,
  `spec.restartPolicy`, `spec.schedulerName`, `spec.serviceAccountName`, `spec.hostNetwork`,
  `status.phase`, `status.podIP`, `status.podIPs`, `status.nominatedNodeName`, any other is
  400 `field label not supported: <field>`). Pod conditions are not among them: a client
  filters on them itself.
- Controllers: a ReplicaSet replaces a pod as soon as it is terminating (its active pods
  exclude those with a deletionTimestamp, `pkg/controller/controller_utils.go`,
  `FilterActivePods`); a StatefulSet re-creates a pod of the same name only once the old one
  is gone. The scheduler puts a new pod on a Ready, schedulable node whose machine runs, and
  whose labels each PersistentVolume bound to the pod's claims admits (its VolumeBinding
  plugin, `pkg/scheduler/framework/plugins/volumebinding/binder.go`, `checkBoundClaims` ->
  `pkg/volume/util/util.go`, `CheckNodeAffinity`: no required affinity admits every node, else
  any term whose every expression holds; `In`, `NotIn`, `Exists`, `DoesNotExist` here); it is
  Ready `pod_start` seconds later. A node's labels are what its kubelet sets
  (`kubernetes.io/hostname`, `pkg/kubelet/kubelet_node_status.go`, `initialNode`) and, per
  node, `node_labels`: those Hetzner's CSI node plugin has the kubelet add
  (`csi.hetzner.cloud/location`, its server's; `pkg/volume/csi/nodeinfomanager`,
  `InstallCSIDriver`), put back on the Node a new server registers.
- Nodes and machines (`pkg/kubelet/kubelet_node_status.go`, `tryRegisterWithAPIServer`, and
  the node lifecycle controller's `--node-monitor-grace-period`, 40 s): a deleted server's
  node keeps its last status (Ready, old boot ID) until the grace passes, then its Ready
  condition is Unknown; the node object and its `spec.unschedulable` stay. A created server
  boots for `boot` seconds, then its kubelet registers under the same name with a new
  `nodeInfo.bootID` and posts Ready, and starts the pods still bound to the node again
  (Ready `pod_start` seconds later, once their volumes are there). While the control plane's
  server is down or booting, nothing answers on the API's address: a connection is closed
  without a reply.
- etcd members removed through the API (`raya up` shrinking): the section "removing etcd
  members" at the end, on the etcd model of the section "etcd".
- A Node's provider ID (kubernetes `pkg/apis/core/validation/validation.go`,
  `ValidateNodeUpdate`: "node updates may not change providerID except from \"\" to valid"):
  a PATCH that changes a set `spec.providerID` is 422 Invalid. raya's kubelets register with
  `provider-id=hcloud://<server id>` (raya-node-metadata); the stand-in knows each node's
  current Hetzner server (`servers`, node name -> id; 0 once deleted).
- Registration (`pkg/kubelet/kubelet_node_status.go`, `registerWithAPIServer`,
  `tryRegisterWithAPIServer`, `initialNode`): a kubelet registers once per start; its Create
  makes a new Node (schedulable, its provider ID the new server's), but when a Node of that
  name exists, even one being deleted (kept by a finalizer), the kubelet keeps it and
  reconciles only the attach-detach annotation, default labels and extended resources: the
  old `spec.providerID` stays. A Node deleted while its kubelet runs is not created again
  until that kubelet restarts (`registrationCompleted`).
- Hetzner's cloud controller (`cloud_controller=True`; it runs only while the API answers):
  the node lifecycle controller (k8s.io/cloud-provider `controllers/nodelifecycle`,
  `MonitorNodes`, every `--node-monitor-period`, 5 s) deletes a Node whose Ready condition is
  not True and whose server no longer exists (hcloud-cloud-controller-manager
  `hcloud/instances.go`, `InstanceExists` -> `lookupServer` by the provider ID's server id).
  Each LoadBalancer Service in `load_balancers` is synced with every node as a target
  (cloud-provider `controllers/service`, `nodeSyncLoop`; hcloud-cloud-controller-manager
  `hcops/load_balancer.go`, `ReconcileHCLBTargets`: the target's server id from the Node's
  provider ID); a provider ID naming a server that is gone fails the whole sync
  (hcloud-cloud-controller-manager#146, #505). Each sync's outcome is in `lb_syncs`.
- Volumes on Hetzner's CSI driver (PersistentVolumes with a `csi` source, `objects`):
  the attach/detach controller (`pkg/controller/volume/attachdetach/reconciler/
  reconciler.go`) wants a volume attached to the node of each scheduled pod using it and
  creates its VolumeAttachment (`pkg/volume/csi/csi_attacher.go`, `Attach`: named
  `csi-<sha256(handle, attacher, node)>`), but not while the volume (ReadWriteOnce) is
  attached elsewhere ("Multi-Attach error"); it detaches a volume no pod on the node needs by
  deleting the VolumeAttachment once the node's `status.volumesInUse` no longer lists it, or
  after `maxWaitForUnmountDuration`, 6 min, whatever it lists, and keeps
  `status.volumesAttached` (`statusupdater`). A deleted Node's last `volumesInUse` still
  counts (`ad_controller.go`, `nodeDelete` -> `processVolumesInUse`), and the node stays in
  the desired state while pods bound to it use volumes (`DeleteNode` refuses). An attachment
  deleted behind its back is attached again at its next sync (`syncStates`, within the 1 min
  `--attach-detach-reconcile-sync-period`; at once here). The kubelet's volume manager lists a
  volume in `volumesInUse` while a pod on the node uses it and until the status update after
  the unmount (10 s, `nodeStatusUpdateFrequency`), only while its server runs. The external
  attacher (kubernetes-csi/external-attacher `pkg/controller/csi_handler.go`, `syncAttach`,
  `syncDetach`) publishes (Hetzner attaches the volume to the node's server) and sets
  `status.attached: true`, unpublishes a deleted one and drops its finalizer; Hetzner's driver
  does not advertise LIST_VOLUMES_PUBLISHED_NODES (hetznercloud/csi-driver
  `driver/controller.go`, `ControllerGetCapabilities`), so an attachment already `attached:
  true` is never checked again: deleting a server detaches its volumes at Hetzner, and the
  record stays `attached: true` (csi-driver#89). A pod using such a volume starts only once
  Hetzner has it on the pod's server (the kubelet's `WaitForAttach`).

- Deployments kept in `objects`: a merge PATCH of the pod template's annotations (`kubectl
  rollout restart`) increments `metadata.generation` when the spec changes
  (`pkg/registry/apps/deployment/strategy.go`, `PrepareForUpdate`); the status is left to
  whoever models the workload's rollout (tests/operate/autoscaler_double.py).

Time is `Cluster.clock()` (seconds), so a test moves it instead of waiting; timestamps are
that many seconds after `EPOCH`. The Hetzner side (a server deleted, a server created) reaches
the stand-in through `server_deleted` and `server_created`."""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import math
import re
import ssl
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from raya.nodes.identity import CertificateAuthority
from tests.nodes.k3s_join import serving_certificate
from tests.support import serving

EPOCH = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
DEFAULT_GRACE = 30  # terminationGracePeriodSeconds when a pod sets none
DELETION_TIMEOUT = 120  # the disruption controller's DeletionTimeout
NODE_MONITOR_GRACE = 40  # kube-controller-manager --node-monitor-grace-period
TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."
NODE_MONITOR_PERIOD = 5.0  # the cloud node lifecycle controller's loop
NODE_SYNC_PERIOD = 100.0  # the service controller's nodeSyncPeriod
UNMOUNT = 10.0  # a volume leaves volumesInUse at the kubelet's next status update
MAX_WAIT_FOR_UNMOUNT = 360.0  # the attach/detach controller's maxWaitForUnmountDuration
CSI_DRIVER = "csi.hetzner.cloud"
ATTACHER_FINALIZER = "external-attacher/csi-hetzner-cloud"
ETCD_FINALIZER = "wrangler.cattle.io/managed-etcd-controller"
VOLUME_ATTACHMENTS = "/apis/storage.k8s.io/v1/volumeattachments"


def stamp(seconds: float) -> str:
    return (EPOCH + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def initial_server(name: str) -> int:
    """The Hetzner id of node `name`'s server before any test changes it."""
    return 100000 + zlib.crc32(name.encode()) % 100000


def seconds_of(text: str) -> float:
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    return (moment - EPOCH).total_seconds()


@dataclass
class Machine:
    """A node's server as the kubelet on it lives it."""

    running: bool = True
    since: float = 0.0  # when it was deleted, or created
    boot_id: str = "b0"
    kubelet_version: str = ""
    comes_up: bool = True  # False: a boot that never reaches k3s (say, an emergency shell)


@dataclass
class Cluster:
    """What the API server holds (nodes, pods, PodDisruptionBudgets, other objects by path),
    the machines under the nodes, and the clock everything reads."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    budgets: list[dict[str, Any]] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # any other GET, by path
    clock: Callable[[], float] = lambda: 0.0
    control_plane: str = "control-plane"
    boot: float = 90.0  # a created server's boot until its kubelet posts Ready
    pod_start: float = 10.0  # a scheduled pod until Ready
    log: list[tuple[float, str, str]] = field(default_factory=list)  # (time, method, path)
    events: list[tuple[float, str]] = field(default_factory=list)  # what happened, when
    machines: dict[str, Machine] = field(default_factory=dict)
    # "namespace/name" of each ReplicaSet and StatefulSet -> (kind, replicas): as many pods as
    # it first owns here
    controllers: dict[str, tuple[str, int]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _serial: int = 0
    # k3s' embedded etcd as the API shows it (the section "etcd" below); None: not modelled,
    # and the API answers while `control_plane`'s machine runs
    etcd: Etcd | None = None
    # node -> its current Hetzner server id (0: deleted); a node's first from its provider ID
    servers: dict[str, int] = field(default_factory=dict)
    cloud_controller: bool = False  # Hetzner's cloud controller runs (see the docstring)
    load_balancers: list[str] = field(default_factory=list)  # LoadBalancer Services
    lb_syncs: list[tuple[float, str, str]] = field(default_factory=list)  # (time, service, outcome)
    attachments: dict[str, dict[str, Any]] = field(default_factory=dict)  # VolumeAttachments
    volume_servers: dict[str, int] = field(default_factory=dict)  # PV -> server (Hetzner's view)
    templates: dict[str, list[Any]] = field(default_factory=dict)  # controller -> pod volumes
    # node -> the labels its kubelet adds at registration beyond its own (the CSI topology)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    _next_server: int = 200000
    _unmounted: dict[tuple[str, str], float] = field(default_factory=dict)  # (node, PV) -> when
    _unwanted: dict[str, float] = field(default_factory=dict)  # attachment -> not needed since
    _in_use_seen: dict[str, list[str]] = field(default_factory=dict)  # node -> volumesInUse
    _lifecycle_at: float = -NODE_MONITOR_PERIOD
    _lb_at: float = -NODE_SYNC_PERIOD

    # --- the Hetzner side ------------------------------------------------------------------

    def server_deleted(self, name: str) -> None:
        """Hetzner deletes the server, and with it detaches its volumes."""
        with self.lock:
            self.settle()
            self.machines[name] = Machine(running=False, since=self.clock())
            gone = self.servers.get(name, 0)
            self.servers[name] = 0
            for volume in [v for v, server in self.volume_servers.items() if server == gone]:
                del self.volume_servers[volume]
            self.events.append((self.clock(), f"{name}: server deleted"))

    def server_created(
        self, name: str, kubelet_version: str, comes_up: bool = True, server: int | None = None
    ) -> None:
        """A new server for node `name` starts booting, on `kubelet_version`; it must have been
        deleted first (Hetzner's names are unique per project). `server`: its Hetzner id, if
        a Hetzner model made it (else one of the stand-in's own)."""
        with self.lock:
            self.settle()
            old = self.machines.get(name)
            if old is None or old.running:
                raise ValueError(f"{name}: a server with this name exists (Hetzner refuses it)")
            self.machines[name] = Machine(
                running=False,
                since=self.clock(),
                boot_id=str(uuid.uuid4()),
                kubelet_version=kubelet_version,
                comes_up=comes_up,
            )
            self._next_server += 1
            self.servers[name] = self._next_server if server is None else server
            self.events.append((self.clock(), f"{name}: server created"))

    def kubelet_restarted(self, name: str, kubelet_version: str) -> None:
        """k3s restarts on node `name`'s running server: its kubelet registers again (a new
        Node if there is none, with the provider ID of the server it runs on)."""
        with self.lock:
            self.settle()
            machine = self.machines.setdefault(name, Machine(kubelet_version=kubelet_version))
            self._register(name, machine)

    def api_up(self) -> bool:
        if self.etcd is not None:
            return self.etcd.quorum(self)
        machine = self.machines.get(self.control_plane)
        return machine is None or machine.running

    # --- time passing: kubelets, controllers ------------------------------------------------

    def settle(self) -> None:
        """Everything the kubelets and controllers have done by `clock()`."""
        now = self.clock()
        for name, node in self.nodes.items():
            self.servers.setdefault(name, _server_id(node))
        for found in self.pods:
            key = _controller_key(found)
            if key and key not in self.controllers:
                owned = sum(1 for p in self.pods if _controller_key(p) == key)
                self.controllers[key] = (_controller(found)[0], owned)
                self.templates[key] = list(found["spec"].get("volumes") or [])
        for name, machine in self.machines.items():
            booted = machine.kubelet_version and now >= machine.since + self.boot
            if not machine.running and machine.comes_up and booted:
                machine.running, machine.since = True, machine.since + self.boot
                self._register(name, machine)
        for name, node in self.nodes.items():
            under = self.machines.get(name)
            gone = under is not None and not under.running
            if gone and under and self.api_up() and now >= under.since + NODE_MONITOR_GRACE:
                node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
        if (
            self.cloud_controller
            and self.api_up()
            and now >= self._lifecycle_at + NODE_MONITOR_PERIOD
        ):
            self._lifecycle_at = now
            self._node_lifecycle()
        for found in list(self.pods):
            self._kubelet(found, now)
        self._schedule(now)
        self._volumes_in_use(now)
        self._attach_detach(now)
        for budget in self.budgets:
            self._budget_status(budget, now)
        if self.etcd is not None:
            self.etcd.settle(self, now)
            member_controller(self)
        if self.cloud_controller and self.api_up() and now >= self._lb_at + NODE_SYNC_PERIOD:
            self._lb_at = now
            for service in self.load_balancers:
                self.lb_syncs.append((now, service, self._lb_targets()))

    # --- Hetzner's cloud controller ------------------------------------------------------------

    def _node_lifecycle(self) -> None:
        """Delete each Node that is not Ready and whose server is gone (`InstanceExists`)."""
        existing = {server for server in self.servers.values() if server}
        for name, node in list(self.nodes.items()):
            if not _node_ready(node) and _server_id(node) not in existing:
                self.events.append((self.clock(), f"cloud controller: {name}'s server is gone"))
                delete_node(self, name)

    def _lb_targets(self) -> str:
        """`ReconcileHCLBTargets`: every node's server as a target, or the first error."""
        existing = {server for server in self.servers.values() if server}
        targets = []
        for name, node in sorted(self.nodes.items()):
            server = _server_id(node)
            if server not in existing:
                return f"failed: node {name}: server {server} not found"
            targets.append(server)
        return f"targets {', '.join(str(t) for t in targets)}"

    # --- volumes: the kubelet's volume manager, the attach/detach controller, the attacher ---

    def _claimed(self, found: dict[str, Any]) -> list[dict[str, Any]]:
        """The CSI PersistentVolumes the pod's claims are bound to."""
        return [
            volume
            for volume in self._bound(found)
            if (volume["spec"].get("csi") or {}).get("driver") == CSI_DRIVER
        ]

    def _volumes_in_use(self, now: float) -> None:
        """Each running kubelet's `volumesInUse`: its pods' volumes, and those unmounted less
        than a status update ago."""
        for name, node in self.nodes.items():
            if not self._running(name):
                continue  # nobody updates its status
            used = {
                _unique(v)
                for p in self.pods
                if p["spec"].get("nodeName") == name
                for v in self._claimed(p)
            }
            before = set(node["status"].get("volumesInUse") or [])
            for gone in before - used:
                self._unmounted.setdefault((name, gone), now)
            lingering = {v for v in before - used if now < self._unmounted[(name, v)] + UNMOUNT}
            for v in used:
                self._unmounted.pop((name, v), None)
            node["status"]["volumesInUse"] = sorted(used | lingering)

    def _attach_detach(self, now: float) -> None:
        for name, node in self.nodes.items():  # what `processVolumesInUse` last saw
            self._in_use_seen[name] = list(node["status"].get("volumesInUse") or [])
        wanted: dict[str, dict[str, Any]] = {}  # attachment name -> its PV, for scheduled pods
        for found in self.pods:
            node = found["spec"].get("nodeName")
            if node:  # a node stays in the desired state while pods there use volumes
                for volume in self._claimed(found):
                    wanted[_attachment_name(volume, node)] = volume | {"node": node}
        for name, volume in wanted.items():
            pv = volume["metadata"]["name"]
            elsewhere = [
                a
                for a in self.attachments.values()
                if a["spec"]["source"]["persistentVolumeName"] == pv
                and a["metadata"]["name"] != name
            ]
            if name not in self.attachments and not elsewhere:
                self.attachments[name] = _attachment(name, pv, volume["node"], now)
                self.events.append((now, f"attachment {pv} -> {volume['node']} created"))
        for name, found in list(self.attachments.items()):
            node, pv = found["spec"]["nodeName"], found["spec"]["source"]["persistentVolumeName"]
            meta = found["metadata"]
            if name in wanted or meta.get("deletionTimestamp"):
                self._unwanted.pop(name, None)
            else:
                since = self._unwanted.setdefault(name, now)
                in_use = self._in_use_seen.get(node, [])
                volume = self.objects[f"/api/v1/persistentvolumes/{pv}"]
                if _unique(volume) not in in_use or now >= since + MAX_WAIT_FOR_UNMOUNT:
                    meta["deletionTimestamp"] = stamp(now)
            self._attacher(found, node, pv, now)

    def _attacher(self, found: dict[str, Any], node: str, pv: str, now: float) -> None:
        """`syncAttach` / `syncDetach`: publish once, never look again; unpublish a deleted
        one (a server that is gone has nothing attached: done)."""
        server = self.servers.get(node, 0)
        if found["metadata"].get("deletionTimestamp"):
            if server and self.volume_servers.get(pv) == server:
                del self.volume_servers[pv]
            del self.attachments[found["metadata"]["name"]]
            self._volumes_attached(node, pv, False)
            self.events.append((now, f"attachment {pv} -> {node} detached"))
        elif not found["status"]["attached"] and server and pv not in self.volume_servers:
            self.volume_servers[pv] = server
            found["status"]["attached"] = True
            self._volumes_attached(node, pv, True)
            self.events.append((now, f"attachment {pv} -> {node} attached"))

    def _volumes_attached(self, node: str, pv: str, attached: bool) -> None:
        target = self.nodes.get(node)
        volume = self.objects.get(f"/api/v1/persistentvolumes/{pv}")
        if target is None or volume is None:
            return
        unique = _unique(volume)
        kept = [v for v in target["status"].get("volumesAttached") or [] if v["name"] != unique]
        if attached:
            kept.append({"name": unique, "devicePath": ""})
        target["status"]["volumesAttached"] = kept

    def _mountable(self, found: dict[str, Any]) -> bool:
        """Every CSI volume of the pod is on its node's server, as Hetzner says."""
        server = self.servers.get(found["spec"].get("nodeName", ""), 0)
        return all(
            server and self.volume_servers.get(v["metadata"]["name"]) == server
            for v in self._claimed(found)
        )

    def _register(self, name: str, machine: Machine) -> None:
        node = self.nodes.get(name)
        if node is None:  # the kubelet's Create: a new Node, the new server's provider ID
            server = self.servers.get(name, 0)
            node = self.nodes[name] = node_object(
                name, machine.kubelet_version, server=server, labels=self.node_labels.get(name)
            )
            self.events.append((machine.since, f"{name}: new Node, hcloud://{server}"))
        info = node["status"]["nodeInfo"]
        info["bootID"], info["kubeletVersion"] = machine.boot_id, machine.kubelet_version
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        self.events.append((machine.since, f"{name}: registered, boot {machine.boot_id}"))
        for found in self.pods:  # the pods still bound here start again, on the new boot
            if found["spec"].get("nodeName") == name and not found["metadata"].get(
                "deletionTimestamp"
            ):
                found["status"] = {"phase": "Pending", "startTime": stamp(machine.since)}

    def _running(self, node_name: str) -> bool:
        machine = self.machines.get(node_name)
        return machine is None or machine.running

    def _kubelet(self, found: dict[str, Any], now: float) -> None:
        node_name, status = found["spec"].get("nodeName", ""), found["status"]
        if not node_name or not self._running(node_name):
            return
        deleting = found["metadata"].get("deletionTimestamp")
        if deleting and now >= seconds_of(deleting):
            self._remove(found)
        elif (
            not deleting
            and not _ready(found)
            and now >= seconds_of(status["startTime"]) + (self.pod_start)
            and self._mountable(found)
        ):
            status.update(phase="Running", conditions=[{"type": "Ready", "status": "True"}])

    def _remove(self, found: dict[str, Any]) -> None:
        self.pods.remove(found)
        self.events.append((self.clock(), f"pod {_key(found)} gone"))

    def _schedule(self, now: float) -> None:
        """Controllers top up their pods; the scheduler binds pending ones."""
        for key, (kind, replicas) in self.controllers.items():
            owned = [p for p in self.pods if _controller_key(p) == key]
            active = [p for p in owned if not p["metadata"].get("deletionTimestamp")]
            for _ in range(replicas - (len(active) if kind == "ReplicaSet" else len(owned))):
                self.pods.append(self._replacement(key, kind, now))
        places = sorted(
            name
            for name, node in self.nodes.items()
            if self._running(name) and _node_ready(node) and not node["spec"].get("unschedulable")
        )
        for found in self.pods:
            if found["spec"].get("nodeName"):
                continue
            if found["spec"].get("schedulingGates"):
                gated = "Scheduling is blocked due to non-empty scheduling gates"
                _scheduled(found, {"status": "False", "reason": "SchedulingGated",
                                   "message": gated})  # fmt: skip
                continue
            bound = self._bound(found)
            fits = [
                n
                for n in places
                if _fits(found, self.nodes[n]) and all(_admits(v, self.nodes[n]) for v in bound)
            ]
            if fits:
                found["spec"]["nodeName"] = fits[0]
                found["status"]["startTime"] = stamp(now)
                _scheduled(found, {"status": "True"})
            else:
                failed = f"0/{len(self.nodes)} nodes are available"
                _scheduled(found, {"status": "False", "reason": "Unschedulable", "message": failed})

    def _bound(self, found: dict[str, Any]) -> list[dict[str, Any]]:
        """The PersistentVolumes the pod's claims are bound to, whatever their source."""
        namespace, volumes = found["metadata"]["namespace"], []
        for source in found["spec"].get("volumes") or []:
            claim_name = (source.get("persistentVolumeClaim") or {}).get("claimName")
            claim = self.objects.get(
                f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim_name}"
            )
            bound = (claim or {}).get("spec", {}).get("volumeName")
            volume = self.objects.get(f"/api/v1/persistentvolumes/{bound}") if bound else None
            if volume is not None:
                volumes.append(volume)
        return volumes

    def _replacement(self, key: str, kind: str, now: float) -> dict[str, Any]:
        namespace, owner = key.split("/", 1)
        self._serial += 1
        name = f"{owner}-{self._serial:05x}" if kind == "ReplicaSet" else self._gone_name(key)
        made = pod(name, namespace, "", owner=kind, controller=owner)
        made["spec"]["volumes"] = [dict(v) for v in self.templates.get(key, [])]
        made["status"] = {"phase": "Pending"}
        self.events.append((now, f"pod {namespace}/{name} created by {kind} {owner}"))
        return made

    def _gone_name(self, key: str) -> str:
        """A StatefulSet's missing ordinal (its pods are <name>-<ordinal>)."""
        owner = key.split("/", 1)[1]
        taken = {p["metadata"]["name"] for p in self.pods if _controller_key(p) == key}
        return next(f"{owner}-{i}" for i in range(len(taken) + 1) if f"{owner}-{i}" not in taken)

    def _budget_status(self, budget: dict[str, Any], now: float) -> None:
        spec, status = budget["spec"], budget.setdefault("status", {})
        selected = [p for p in self.pods if _selects(budget, p)]
        disrupted = {
            name: when
            for name, when in (status.get("disruptedPods") or {}).items()
            if any(
                p["metadata"]["name"] == name and not p["metadata"].get("deletionTimestamp")
                for p in selected
            )
            and seconds_of(when) + DELETION_TIMEOUT > now
        }
        healthy = sum(
            1
            for p in selected
            if not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["name"] not in disrupted
            and _ready(p)
        )
        controllers = {_controller_key(p) for p in selected}
        scaled = sum(self.controllers[key][1] for key in controllers if key)
        if "minAvailable" in spec and isinstance(spec["minAvailable"], int):
            expected, desired = len(selected), spec["minAvailable"]
        elif "minAvailable" in spec:
            expected = scaled
            desired = _scaled(spec["minAvailable"], expected)
        else:
            expected = scaled
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        allowed = max(0, healthy - desired) if expected > 0 else 0
        status.update(
            currentHealthy=healthy,
            desiredHealthy=desired,
            expectedPods=expected,
            disruptionsAllowed=allowed,
            disruptedPods=disrupted,
            observedGeneration=budget["metadata"].get("generation", 1),
        )

    # --- what the API does ----------------------------------------------------------------

    def find(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next(
            (
                p
                for p in self.pods
                if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name
            ),
            None,
        )

    def delete(self, found: dict[str, Any], grace: int | None) -> None:
        """Graceful deletion, as `CheckGracefulDelete` and `BeforeDelete` decide it."""
        period = (
            grace
            if grace is not None
            else found["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        )
        phase = (found.get("status") or {}).get("phase")
        if not found["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
            period = 0
        meta, now = found["metadata"], self.clock()
        if period == 0:
            self._remove(found)
            return
        current = meta.get("deletionGracePeriodSeconds")
        if current is not None and period >= current:
            return  # a second delete may only shorten the grace
        meta["deletionTimestamp"] = stamp(now + period)
        meta["deletionGracePeriodSeconds"] = period
        self.events.append((now, f"pod {_key(found)} terminating, {period} s grace"))

    def evict(self, found: dict[str, Any], grace: int | None) -> tuple[int, dict[str, Any]]:
        phase = (found.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Pending") or found["metadata"].get(
            "deletionTimestamp"
        ):
            self.delete(found, grace)
            return 201, _status(201)
        budgets = [b for b in self.budgets if _selects(b, found)]
        if len(budgets) > 1:
            return 500, _status(
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support.",
            )
        if budgets:
            status = budgets[0]["status"]
            unready_but_met = not _ready(found) and (
                status["currentHealthy"] >= status["desiredHealthy"] > 0
            )
            if not unready_but_met:
                if status["disruptionsAllowed"] == 0:
                    cause = (
                        f"The disruption budget {budgets[0]['metadata']['name']} needs "
                        f"{status['desiredHealthy']} healthy pods and has "
                        f"{status['currentHealthy']} currently"
                    )
                    body = _status(429, TOO_MANY, reason="TooManyRequests")
                    body["details"] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
                    return 429, body
                status["disruptionsAllowed"] -= 1
                status["disruptedPods"][found["metadata"]["name"]] = stamp(self.clock())
        self.delete(found, grace)
        return 201, _status(201)


# --- objects ---------------------------------------------------------------------------------


def node_object(
    name: str,
    version: str,
    ready: bool = True,
    unschedulable: bool = False,
    boot: str = "b0",
    server: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node; `server` is its Hetzner server id (None: `initial_server(name)`), `labels`
    those beyond the kubelet's own `kubernetes.io/hostname`."""
    server = initial_server(name) if server is None else server
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": unschedulable, "providerID": f"hcloud://{server}"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "nodeInfo": {
                "kubeletVersion": version,
                "osImage": "Fedora CoreOS 43.20261101.3.0",
                "architecture": "amd64",
                "bootID": boot,
                "containerRuntimeVersion": "containerd://2",
                "kernelVersion": "6",
                "kubeProxyVersion": version,
                "machineID": "",
                "operatingSystem": "linux",
                "systemUUID": "",
            },
            "addresses": [{"type": "InternalIP", "address": "10.0.1.20"}],
        },
    }


def pod(
    name: str,
    namespace: str,
    node_name: str,
    owner: str | None = "ReplicaSet",
    controller: str | None = None,
    labels: Mapping[str, str] | None = None,
    grace: int | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A running, Ready pod; `owner` is its controller's kind (None: a bare pod), `controller`
    its name (by default the pod's name without its last `-part`), `labels` by default
    `app: <controller>`, `grace` its terminationGracePeriodSeconds (None: the default)."""
    controller = controller or name.rsplit("-", 1)[0]
    references = (
        [
            {
                "kind": owner,
                "name": controller,
                "apiVersion": "apps/v1",
                "uid": controller,
                "controller": True,
            }
        ]
        if owner
        else []
    )
    spec: dict[str, Any] = {"nodeName": node_name, "containers": [{"name": "c", "image": "i"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels if labels is not None else {"app": controller}),
            "ownerReferences": references,
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "startTime": stamp(0),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def budget(name: str, namespace: str, app: str, **limit: int | str) -> dict[str, Any]:
    """A PodDisruptionBudget selecting `app: <app>`; `limit` is minAvailable= or
    maxUnavailable=."""
    return {
        "kind": "PodDisruptionBudget",
        "apiVersion": "policy/v1",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": app}}, **limit},
    }


def _key(pod_: dict[str, Any]) -> str:
    return f"{pod_['metadata']['namespace']}/{pod_['metadata']['name']}"


def _controller(pod_: dict[str, Any]) -> tuple[str, str]:
    for owner in pod_["metadata"].get("ownerReferences") or []:
        if owner.get("controller"):
            return owner["kind"], owner["name"]
    return "", ""


def _controller_key(pod_: dict[str, Any]) -> str:
    kind, name = _controller(pod_)
    return (
        f"{pod_['metadata']['namespace']}/{name}" if kind in ("ReplicaSet", "StatefulSet") else ""
    )


def _server_id(node_: dict[str, Any]) -> int:
    """The server id of a Node's `hcloud://<id>` provider ID (0: none)."""
    text = str(node_["spec"].get("providerID") or "").removeprefix("hcloud://")
    return int(text) if text.isdigit() else 0


def _unique(volume: dict[str, Any]) -> str:
    """A CSI volume's unique name in volumesInUse and volumesAttached."""
    return f"kubernetes.io/csi/{CSI_DRIVER}^{volume['spec']['csi']['volumeHandle']}"


def _attachment_name(volume: dict[str, Any], node: str) -> str:
    """`csi_attacher.go`, `getAttachmentName`: sha256 of handle, driver and node."""
    handle = volume["spec"]["csi"]["volumeHandle"]
    return "csi-" + hashlib.sha256(f"{handle}{CSI_DRIVER}{node}".encode()).hexdigest()


def _attachment(name: str, pv: str, node: str, now: float) -> dict[str, Any]:
    return {
        "kind": "VolumeAttachment",
        "apiVersion": "storage.k8s.io/v1",
        "metadata": {
            "name": name,
            "finalizers": [ATTACHER_FINALIZER],
            "creationTimestamp": stamp(now),
        },
        "spec": {
            "attacher": CSI_DRIVER,
            "nodeName": node,
            "source": {"persistentVolumeName": pv},
        },
        "status": {"attached": False},
    }


def _ready(pod_: dict[str, Any]) -> bool:
    conditions = (pod_.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _admits(volume: dict[str, Any], node_: dict[str, Any]) -> bool:
    """`CheckNodeAffinity`: the volume's required node affinity against the node's labels."""
    required = (volume["spec"].get("nodeAffinity") or {}).get("required")
    return required is None or _selector_holds(required, node_)


def _selector_holds(required: dict[str, Any], node_: dict[str, Any]) -> bool:
    """A NodeSelector (`nodeSelectorTerms`) against the node: any term whose expressions on
    its labels and fields on its name all hold (k8s.io/component-helpers
    `scheduling/corev1/nodeaffinity`)."""
    labels = node_["metadata"].get("labels") or {}
    fields = {"metadata.name": node_["metadata"]["name"]}

    def holds(expression: dict[str, Any], on: Mapping[str, str]) -> bool:
        value, values = on.get(expression["key"]), expression.get("values") or []
        operator = expression["operator"]
        if operator in ("Gt", "Lt"):
            if value is None or not value.lstrip("-").isdigit():
                return False
            return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
        return {
            "In": value is not None and value in values,
            "NotIn": value is None or value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[operator]

    return any(
        (term.get("matchExpressions") or term.get("matchFields"))
        and all(holds(e, labels) for e in term.get("matchExpressions") or [])
        and all(holds(e, fields) for e in term.get("matchFields") or [])
        for term in required["nodeSelectorTerms"]
    )


def _fits(pod_: dict[str, Any], node_: dict[str, Any]) -> bool:
    """The scheduler's NodeAffinity and TaintToleration filters (see the docstring)."""
    spec, labels = pod_["spec"], node_["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required is not None and not _selector_holds(required, node_):
        return False
    tolerations = spec.get("tolerations") or []
    return all(
        any(_tolerates(toleration, taint) for toleration in tolerations)
        for taint in node_["spec"].get("taints") or []
        if taint["effect"] in ("NoSchedule", "NoExecute")
    )


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """`ToleratesTaint`."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _scheduled(pod_: dict[str, Any], condition: dict[str, str]) -> None:
    """Sets the pod's `PodScheduled` condition."""
    status = pod_.setdefault("status", {})
    others = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"]
    status["conditions"] = [*others, {"type": "PodScheduled", **condition}]


def _node_ready(node_: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node_["status"]["conditions"]
    )


def _selects(budget_: dict[str, Any], pod_: dict[str, Any]) -> bool:
    """`LabelSelectorAsSelector`: matchLabels only; an empty selector matches nothing."""
    selector = budget_["spec"].get("selector") or {}
    if set(selector) - {"matchLabels"}:
        raise NotImplementedError(f"the stand-in reads matchLabels only, not {sorted(selector)}")
    wanted = selector.get("matchLabels") or {}
    labels = pod_["metadata"].get("labels") or {}
    return (
        budget_["metadata"]["namespace"] == pod_["metadata"]["namespace"]
        and bool(wanted)
        and all(labels.get(k) == v for k, v in wanted.items())
    )


def _scaled(value: int | str, total: int) -> int:
    """`intstr.GetScaledValueFromIntOrPercent(..., roundUp=true)`."""
    if isinstance(value, int):
        return value
    return math.ceil(total * int(value.rstrip("%")) / 100)


# A pod's fields a field selector may name (`pkg/apis/core/v1/conversion.go`).
POD_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda p: str(p["metadata"]["name"]),
    "metadata.namespace": lambda p: str(p["metadata"]["namespace"]),
    "spec.nodeName": lambda p: str(p["spec"].get("nodeName") or ""),
    "spec.restartPolicy": lambda p: str(p["spec"].get("restartPolicy") or "Always"),
    "spec.schedulerName": lambda p: str(p["spec"].get("schedulerName") or "default-scheduler"),
    "spec.serviceAccountName": lambda p: str(p["spec"].get("serviceAccountName") or "default"),
    "spec.hostNetwork": lambda p: str(bool(p["spec"].get("hostNetwork"))).lower(),
    "status.phase": lambda p: str((p.get("status") or {}).get("phase") or ""),
    "status.podIP": lambda p: str((p.get("status") or {}).get("podIP") or ""),
    "status.podIPs": lambda p: str((p.get("status") or {}).get("podIP") or ""),
    "status.nominatedNodeName": lambda p: str(
        (p.get("status") or {}).get("nominatedNodeName") or ""
    ),
}


def _field_selector(text: str) -> list[Callable[[dict[str, Any]], bool]]:
    """`ParseSelector` of a pod list's `fieldSelector`: one test per requirement; ValueError
    for a field a pod does not offer."""
    tests: list[Callable[[dict[str, Any]], bool]] = []
    for requirement in filter(None, text.split(",")):
        found = re.fullmatch(r"([^=!]+)(!=|==|=)(.*)", requirement)
        if found is None:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{requirement}'")
        name, operator, value = found.groups()
        if name not in POD_FIELDS:
            raise ValueError(f"field label not supported: {name}")
        tests.append(functools.partial(_field_holds, POD_FIELDS[name], operator == "!=", value))
    return tests


def _field_holds(
    read: Callable[[dict[str, Any]], str], negated: bool, value: str, pod_: dict[str, Any]
) -> bool:
    return (read(pod_) == value) is not negated


def _status(code: int, message: str = "", reason: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "code": code,
        "status": "Success" if code < 300 else "Failure",
        "message": message,
        "reason": reason,
    }


def _list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items}


# --- the server ------------------------------------------------------------------------------

_POD = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)")


def _handler(state: Cluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def _serve(self, method: str, answer: Callable[[str, str, Any], tuple[int, Any]]) -> None:
            body = self._body() if method in ("POST", "PATCH", "DELETE") else None
            with state.lock:
                state.settle()
                if not state.api_up():
                    self.close_connection = True  # nothing listens while k3s is not up
                    return
                state.log.append((state.clock(), method, self.path))
                if not isinstance(self.connection, ssl.SSLSocket) or not (
                    self.connection.getpeercert()
                ):
                    return self._reply(401, _status(401, "Unauthorized", "Unauthorized"))
                path, _, query = self.path.partition("?")
                self._reply(*answer(path, query, body))

        def do_GET(self) -> None:
            self._serve("GET", _get)

        def do_PATCH(self) -> None:
            kind = self.headers.get("Content-Type", "").split(";")[0].strip()
            self._serve("PATCH", _apply if kind == APPLY else _patch)

        def do_POST(self) -> None:
            self._serve("POST", _post)

        def do_DELETE(self) -> None:
            self._serve("DELETE", _delete)

        def log_message(self, format: str, *args: object) -> None:
            pass

    def _get(path: str, query: str, _: Any) -> tuple[int, Any]:
        if path in state.objects:
            return 200, state.objects[path]
        if path == VOLUME_ATTACHMENTS:
            listed = _list("VolumeAttachmentList", list(state.attachments.values()))
            return 200, listed | {"apiVersion": "storage.k8s.io/v1"}
        if path == "/api/v1/nodes":
            return 200, _list("NodeList", list(state.nodes.values()))
        match = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
        if match:
            found = state.nodes.get(match[1])
            return (200, found) if found else (404, _status(404, reason="NotFound"))
        if path == "/api/v1/pods":
            selector = parse_qs(query, keep_blank_values=True).get("fieldSelector", [""])[0]
            try:
                wanted = _field_selector(selector)
            except ValueError as error:
                return 400, _status(400, str(error), "BadRequest")
            items = [p for p in state.pods if all(test(p) for test in wanted)]
            return 200, _list("PodList", items)
        match = re.fullmatch(
            r"/apis/policy/v1/namespaces/([^/]+)/poddisruptionbudgets/([^/]+)", path
        )
        if match:
            found = next(
                (
                    b
                    for b in state.budgets
                    if (b["metadata"]["namespace"], b["metadata"]["name"]) == (match[1], match[2])
                ),
                None,
            )
            return (200, found) if found else (404, _status(404, reason="NotFound"))
        return 404, _status(404, reason="NotFound")

    def _patch(path: str, _: str, body: Any) -> tuple[int, Any]:
        if _DEPLOYMENT.fullmatch(path) and path in state.objects:
            return 200, patch_deployment(state.objects[path], body)
        match = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
        if match and match[1] in state.nodes:
            node = state.nodes[match[1]]
            spec = body.get("spec") or {}
            was = node["spec"].get("providerID") or ""
            if "providerID" in spec and was and spec["providerID"] != was:
                return 422, _status(  # ValidateNodeUpdate
                    422,
                    f'Node "{match[1]}" is invalid: spec.providerID: Forbidden: node updates '
                    'may not change providerID except from "" to valid',
                    "Invalid",
                )
            node["spec"].update(spec)
            meta = body.get("metadata") or {}
            merge_metadata(node, meta)
            if "finalizers" in meta:
                node["metadata"]["finalizers"] = list(meta["finalizers"] or [])
                if node["metadata"].get("deletionTimestamp") and not meta["finalizers"]:
                    del state.nodes[match[1]]  # the last finalizer gone: the deletion ends
                    state.events.append((state.clock(), f"node {match[1]} deleted"))
                    return 200, node
            if state.etcd is not None:  # the member controller sees it later (`MEMBER_SYNC`)
                state.etcd.changed[match[1]] = state.clock()
            return 200, node
        return 404, _status(404, reason="NotFound")

    def _apply(path: str, query: str, body: Any) -> tuple[int, Any]:
        """Server-side apply of a Secret or a HelmChart (see `apply_object`)."""
        return apply_object(state.objects, path, parse_qs(query), body, state.clock())

    def _post(path: str, _: str, body: Any) -> tuple[int, Any]:
        match = re.fullmatch(_POD.pattern + "/eviction", path)
        if not match:
            return 404, _status(404, reason="NotFound")
        found = state.find(match[1], match[2])
        if found is None:
            return 404, _status(404, f'pods "{match[2]}" not found', "NotFound")
        grace = (body.get("deleteOptions") or {}).get("gracePeriodSeconds")
        return state.evict(found, grace)

    def _delete(path: str, query: str, body: Any) -> tuple[int, Any]:
        node = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
        if node:
            return delete_node(state, node[1])
        attachment = re.fullmatch(VOLUME_ATTACHMENTS + "/([^/]+)", path)
        if attachment:
            found_attachment = state.attachments.get(attachment[1])
            if found_attachment is None:
                return 404, _status(404, reason="NotFound")
            # Kept by the attacher's finalizer until it has unpublished it (`settle`).
            found_attachment["metadata"].setdefault("deletionTimestamp", stamp(state.clock()))
            return 200, found_attachment
        match = _POD.fullmatch(path)
        found = state.find(match[1], match[2]) if match else None
        if found is None:
            return 404, _status(404, reason="NotFound")
        # DeleteOptions come in the body or as query parameters; the body wins.
        asked = parse_qs(query).get("gracePeriodSeconds")
        grace = (body or {}).get("gracePeriodSeconds", int(asked[0]) if asked else None)
        state.delete(found, grace)
        return 200, found

    return Handler


_DEPLOYMENT = re.compile(r"/apis/apps/v1/namespaces/[^/]+/deployments/[^/]+")


def patch_deployment(deployment: dict[str, Any], body: Any) -> dict[str, Any]:
    """A merge patch of a Deployment's pod template annotations (what `kubectl rollout
    restart` sends); any change of the spec increments `metadata.generation`
    (kubernetes `pkg/registry/apps/deployment/strategy.go`, `PrepareForUpdate`). Its status
    is the Deployment controller's: whoever models that workload updates it later."""
    template = (((body or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}
    current = deployment["spec"]["template"].setdefault("metadata", {})
    before = json.dumps(deployment["spec"], sort_keys=True)
    merge_metadata({"metadata": current}, template)
    if json.dumps(deployment["spec"], sort_keys=True) != before:
        deployment["metadata"]["generation"] = deployment["metadata"].get("generation", 1) + 1
    return deployment


APPLY = "application/apply-patch+yaml"
_APPLIED = re.compile(
    r"/api/v1/namespaces/([^/]+)/(secrets)/([^/]+)"
    r"|/apis/helm\.cattle\.io/v1/namespaces/([^/]+)/(helmcharts)/([^/]+)"
)


def apply_object(
    objects: dict[str, dict[str, Any]],
    path: str,
    query: Mapping[str, list[str]],
    body: Any,
    now: float,
) -> tuple[int, Any]:
    """A server-side apply (PATCH `application/apply-patch+yaml`) of a Secret or a HelmChart,
    as kube-apiserver answers it (kubernetes/kubernetes, staging/src/k8s.io/apiserver
    `pkg/endpoints/handlers/patch.go`, `PatchResource` and `applyPatcher`; field managers in
    `structured-merge-diff`, https://kubernetes.io/docs/reference/using-api/server-side-apply/):
    - `fieldManager` is required for an apply (`ValidatePatchOptions`: 422 "fieldManager:
      Required value: is required for apply patch"); `force` is allowed for an apply only;
    - the object's name and namespace must be the URL's (400 BadRequest otherwise);
    - an object that does not exist is created (201), one that does is updated (200);
    - another manager's object is a 409 Conflict unless `force=true`, which takes it over;
    - a Secret's `stringData` is merged into `data`, base64, and never stored
      (`pkg/apis/core/v1/conversion.go`, `Convert_v1_Secret_To_core_Secret`)."""
    import base64

    match = _APPLIED.fullmatch(path)
    if match is None:
        return 404, _status(404, reason="NotFound")
    namespace, resource, name = [group for group in match.groups() if group]
    manager = (query.get("fieldManager") or [""])[0]
    if not manager:
        return 422, _status(422, 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                            "Required value: is required for apply patch", "Invalid")  # fmt: skip
    meta = body.get("metadata") or {}
    if meta.get("name") != name or meta.get("namespace", namespace) != namespace:
        return 400, _status(400, f"the name of the object ({meta.get('name')}) does not match "
                            f"the name on the URL ({name})", "BadRequest")  # fmt: skip
    found = objects.get(path)
    forced = (query.get("force") or [""])[0] == "true"
    owner = found["metadata"]["managedFields"][0]["manager"] if found else manager
    if owner != manager and not forced:
        return 409, _status(409, f'Apply failed with 1 conflict: conflict with "{owner}"',
                            "Conflict")  # fmt: skip
    stored = json.loads(json.dumps(body))
    if resource == "secrets":
        data = dict(stored.get("data") or {})
        for key, value in (stored.pop("stringData", None) or {}).items():
            data[key] = base64.b64encode(value.encode()).decode()
        stored["data"] = data
    stored["metadata"] = {
        **meta,
        "namespace": namespace,
        "uid": (found or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()),
        "creationTimestamp": (found or {}).get("metadata", {}).get("creationTimestamp")
        or stamp(now),
        "managedFields": [{"manager": manager, "operation": "Apply"}],
    }
    objects[path] = stored
    return (200 if found else 201), stored


@contextlib.contextmanager
def kubernetes_api(
    state: Cluster,
    server_ca: CertificateAuthority,
    client_ca_pem: str,
    folder: Path,
    name: str,
    valid: datetime.timedelta = datetime.timedelta(days=365),
) -> Iterator[str]:
    """The API over TLS with a certificate from `server_ca` for `name` (k3s' tls-san) and
    127.0.0.1, valid for `valid` from now; client certificates from `client_ca_pem` only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*serving_certificate(server_ca, folder, dns_names=[name], valid=valid))
    context.verify_mode = ssl.CERT_OPTIONAL
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cadata=client_ca_pem)
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _handler(state)), context) as url:
        yield url


def deployment_authority(resources: Mapping[str, Any], name: str) -> CertificateAuthority:
    """The CA the deployment generated as `name` (`server-ca`, `client-ca`): the certificate
    of resource `name` and the key of `name`-key."""
    return CertificateAuthority(
        cert_pem=resources[name].outputs["certPem"],
        key_pem=resources[f"{name}-key"].outputs["privateKeyPem"],
    )


@contextlib.contextmanager
def deployment_api(state: Cluster, resources: Mapping[str, Any], folder: Path) -> Iterator[str]:
    """`kubernetes_api` as the deployed cluster serves it: a certificate from the deployment's
    server CA for the control plane's record, cp.raya.example.com (k3s' tls-san), client
    certificates from its client CA only."""
    server_ca = deployment_authority(resources, "server-ca")
    client_ca = resources["client-ca"].outputs["certPem"]
    with kubernetes_api(state, server_ca, client_ca, folder, "cp.raya.example.com") as url:
        yield url


# --- etcd: k3s' embedded etcd as the Kubernetes API shows it (issue 22, raya roll/status) ------
#
# Written from k3s' own source (k3s-io/k3s):
# - `pkg/etcd/metadata_controller.go`, `handleSelf`: each server's k3s labels its own node
#   `node-role.kubernetes.io/etcd` (and control-plane, master) "true" and annotates it with its
#   member name `etcd.k3s.cattle.io/node-name` and address `etcd.k3s.cattle.io/node-address`.
# - `pkg/etcd/etcd.go`, `setName`: the member name is `<node name>-<8 hex>`, written once to
#   `db/etcd/name` on the server's data volume; `Start`, `IsInitialized`: a data directory with
#   a WAL starts "etcd for existing cluster member", the same member, a voter as before; `join`
#   adds a new member with `MemberAddAsLearner`.
# - `pkg/etcd/etcd.go`, `manageLearners`: every 15 s (`manageTickerTime`) the etcd leader, and
#   only it (so nothing is written without quorum), tries to promote each learner
#   (`trackLearnerProgress`, `MemberPromote`: etcd accepts it once the learner has caught up)
#   and sets the node condition `EtcdIsVoter` (`setEtcdStatusCondition`) on each etcd node
#   whose annotation names a member: True `MemberNotLearner` for a voter, False
#   `MemberIsLearner` for a learner (also on the tick that promotes it: the status is taken
#   before the promotion), False `Unhealthy` with etcd's error when the member's status
#   cannot be read (its server is down); False `NotAMember` for an etcd node no member
#   matches. A condition that does not change keeps its times (its heartbeat is refreshed
#   every 5 min only); one that changes gets new `lastTransitionTime` and `lastHeartbeatTime`.
#   While nothing is written, a node keeps the condition last written: stale.
# - `pkg/etcd/member_controller.go`, `onRemove`: a deleted node object with the etcd label has
#   its member removed (`RemovePeer`); `pkg/daemons/executor/embed.go`, `ETCD`: a server
#   whose member was removed writes a `tombstone`, and on its next start (`Register`) k3s
#   moves its data directory aside, takes a new name and joins again as a learner through its
#   `server:`. The first control plane has no `server:` but `cluster-init`: without raya's
#   datastore guard before each k3s start (`raya-k3s-datastore`, which takes a `tombstone` for
#   a blank datastore and joins through a peer: tests/nodes/test_datastore_guard.py) it starts
#   a cluster of its own, whose API this one never sees.
# - The `kubernetes` EndpointSlice in `default` lists each API server's advertise address
#   (k3s' `advertise-address`: raya's private address) while its lease lives
#   (kubernetes/kubernetes `pkg/controlplane/reconcilers/lease.go`, `ReconcileEndpoints`;
#   `endpointsadapter.go`, `updateEndpointSlice`; TTL 15 s, `DefaultEndpointReconcilerTTL` in
#   `pkg/controlplane/instance.go`). The API answers while a majority of the voters runs.

MANAGE_TICK = 15.0  # k3s' manageTickerTime
HEARTBEAT = 300.0  # k3s' heartbeatInterval for an unchanged condition
LEASE_TTL = 15.0  # kube-apiserver's DefaultEndpointReconcilerTTL
ETCD_ROLE = "node-role.kubernetes.io/etcd"
MEMBER_NAME = "etcd.k3s.cattle.io/node-name"
MEMBER_ADDRESS = "etcd.k3s.cattle.io/node-address"
SLICE = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes"
_CONDITIONS = {
    "voter": ("True", "MemberNotLearner", "Node is a voting member of the etcd cluster"),
    "learner": ("False", "MemberIsLearner", "Node has not been promoted to voting member of the "
                "etcd cluster"),
    "unhealthy": ("False", "Unhealthy", "failed to check etcd member status: context deadline "
                  "exceeded"),
    "unjoined": ("False", "NotAMember", "Node is not a member of the etcd cluster"),
}  # fmt: skip


@dataclass
class Member:
    name: str  # <node>-<8 hex>, as on the server's volume
    learner: bool = False
    since: float = 0.0  # when it joined


@dataclass
class Etcd:
    """The members by node name (each a control plane: `control-plane`, `control-plane-<k>`),
    their addresses, and the `EtcdIsVoter` condition the leader last wrote on each node.
    `cloud_controller`: a node whose server is gone is deleted once it is not Ready, as
    Hetzner's cloud controller does (k8s.io/cloud-provider `CloudNodeLifecycleController`:
    the node's provider ID names a server that no longer exists). `guard`: the first control
    plane's datastore guard runs before each k3s start and joins it through a peer like the
    others (raya's nodes since issue 22); False: a node without it, which splits."""

    addresses: dict[str, str]  # node -> private address (member address, API advertise)
    members: dict[str, Member] = field(default_factory=dict)
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> written
    cluster_init: str = "control-plane"  # the server whose config has no `server:`
    catch_up: float = 20.0  # a learner's time to catch up with the leader's log
    cloud_controller: bool = False
    guard: bool = True
    last_tick: float = 0.0
    stopped: dict[str, float] = field(default_factory=dict)  # node -> when its API went away
    split: set[str] = field(default_factory=set)  # started a cluster of its own
    # The section "removing etcd members": when each node last changed through the API (the
    # member controller acts `MEMBER_SYNC` later); the k3s of each removed member due to start
    # again (`Restart=always`) and when; the nodes whose k3s will not start again (raya
    # disabled it, `Restart=no`); (time, voters running, voters) at every change.
    changed: dict[str, float] = field(default_factory=dict)
    restarting: dict[str, tuple[Machine, float]] = field(default_factory=dict)
    disarmed: set[str] = field(default_factory=set)
    k3s_down: dict[str, Machine] = field(default_factory=dict)  # the server runs, k3s not
    voters: list[tuple[float, int, int]] = field(default_factory=list)

    @classmethod
    def of(cls, cluster: Cluster, addresses: Mapping[str, str], **options: Any) -> Etcd:
        """Every node in `addresses` a voter since time 0, its node labelled, annotated and
        its condition True; `cluster.etcd` set."""
        etcd = cls(dict(addresses), **options)
        etcd.members = {node: Member(f"{node}-{uuid.uuid4().hex[:8]}") for node in addresses}
        cluster.etcd = etcd
        for node in addresses:
            cluster.nodes[node]["status"]["addresses"] = [
                {"type": "InternalIP", "address": addresses[node]}
            ]
            etcd._label(cluster.nodes[node], node)
            etcd._condition(cluster, node, "voter", 0.0)
        etcd.settle(cluster, 0.0)
        return etcd

    def _running(self, cluster: Cluster, node: str) -> bool:
        machine = cluster.machines.get(node)
        return node not in self.split and (machine is None or machine.running)

    def quorum(self, cluster: Cluster) -> bool:
        voters = [n for n, m in self.members.items() if not m.learner]
        up = [n for n in voters if self._running(cluster, n)]
        return len(up) > len(voters) / 2

    def delete_node(self, cluster: Cluster, node: str) -> None:
        """`kubectl delete node`: the node object goes, and with it its member."""
        with cluster.lock:
            cluster.settle()
            self._delete(cluster, node)

    def _delete(self, cluster: Cluster, node: str) -> None:
        cluster.nodes.pop(node, None)
        self.conditions.pop(node, None)
        cluster.events.append((cluster.clock(), f"{node}: node object deleted"))
        if node in self.members and self.quorum(cluster):
            del self.members[node]
            cluster.events.append((cluster.clock(), f"etcd: {node}'s member removed"))
            machine = cluster.machines.get(node)
            alone = node == self.cluster_init and not self.guard  # no `server:` to join
            if alone and machine is not None and not machine.running:
                self.split.add(node)  # its next start makes a cluster of its own
                machine.comes_up = False  # ... whose API this one is not

    def settle(self, cluster: Cluster, now: float) -> None:
        restart(cluster, now)
        for node in self.addresses:
            gone = not self._running(cluster, node)
            ready = node in cluster.nodes and _node_ready(cluster.nodes[node])
            if self.cloud_controller and gone and node in cluster.nodes and not ready:
                self._delete(cluster, node)
            if gone or node not in cluster.nodes:
                continue
            if node not in self.members:
                # Removed while it was gone: a tombstone, a restart, a new name, a learner.
                machine = cluster.machines.get(node)
                since = machine.since if machine is not None else now
                self.members[node] = Member(f"{node}-{uuid.uuid4().hex[:8]}", True, since)
                cluster.events.append((since, f"etcd: {node} joined as a learner"))
            self._label(cluster.nodes[node], node)
        while self.last_tick + MANAGE_TICK <= now:
            self.last_tick += MANAGE_TICK
            if self.quorum(cluster):
                self._manage(cluster, self.last_tick)
        for node, written in self.conditions.items():
            if node in cluster.nodes:
                conditions = cluster.nodes[node]["status"]["conditions"]
                kept = [c for c in conditions if c["type"] != "EtcdIsVoter"]
                cluster.nodes[node]["status"]["conditions"] = [*kept, dict(written)]
        for node in self.addresses:
            machine = cluster.machines.get(node)
            if self._running(cluster, node):
                self.stopped.pop(node, None)
            else:  # since its server was deleted (or re-created, at once, with the Replacer)
                self.stopped.setdefault(node, machine.since if machine is not None else now)
        if self.quorum(cluster):
            self._slice(cluster, now)
        self.count(cluster, now)

    def count(self, cluster: Cluster, now: float) -> None:
        """`voters` gets (now, running voters, voters) when either changed."""
        voters = [n for n, m in self.members.items() if not m.learner]
        count = (sum(1 for n in voters if self._running(cluster, n)), len(voters))
        if not self.voters or self.voters[-1][1:] != count:
            self.voters.append((now, *count))

    def _manage(self, cluster: Cluster, tick: float) -> None:
        """One run of the leader's `manageLearners`."""
        named = {
            node["metadata"].get("annotations", {}).get(MEMBER_NAME): name
            for name, node in cluster.nodes.items()
            if node["metadata"].get("labels", {}).get(ETCD_ROLE) == "true"
        }
        for owner, member in list(self.members.items()):
            state = "learner" if member.learner else "voter"
            up = self._running(cluster, owner)
            if member.learner and up and tick >= member.since + self.catch_up:
                member.learner = False  # MemberPromote; the condition says so next tick
                cluster.events.append((tick, f"etcd: {owner} promoted to voter"))
            node = named.pop(member.name, None)
            if node is not None:
                self._condition(cluster, node, state if up else "unhealthy", tick)
        for node in named.values():
            self._condition(cluster, node, "unjoined", tick)

    def _condition(self, cluster: Cluster, node: str, state: str, tick: float) -> None:
        status, reason, message = _CONDITIONS[state]
        old = self.conditions.get(node)
        if old and (old["status"], old["reason"], old["message"]) == (status, reason, message):
            if tick - seconds_of(old["lastHeartbeatTime"]) >= HEARTBEAT:
                old["lastHeartbeatTime"] = stamp(tick)
            return
        cluster.events.append((tick, f"etcd: {node} {state}"))
        self.conditions[node] = {
            "type": "EtcdIsVoter",
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp(tick),
            "lastTransitionTime": stamp(tick),
        }

    def _label(self, node: dict[str, Any], name: str) -> None:
        meta = node["metadata"]
        meta.setdefault("labels", {}).update(
            {
                ETCD_ROLE: "true",
                "node-role.kubernetes.io/control-plane": "true",
                "node-role.kubernetes.io/master": "true",
            }
        )
        meta.setdefault("annotations", {}).update(
            {MEMBER_NAME: self.members[name].name, MEMBER_ADDRESS: self.addresses[name]}
        )

    def _slice(self, cluster: Cluster, now: float) -> None:
        """The API servers whose lease lives: running, or gone less than the TTL ago."""
        serving = sorted(
            self.addresses[node]
            for node in self.addresses
            if node not in self.stopped or now < self.stopped[node] + LEASE_TTL
        )
        cluster.objects[SLICE] = {
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in serving],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }


# --- removing etcd members through the API (`raya up` shrinking the control planes) ----------
#
# On the etcd model above, written from k3s-io/k3s `pkg/etcd/member_controller.go`
# (`etcdMemberHandler.sync`, `onRemove`), `pkg/etcd/etcd.go` (`RemovePeer`, `Register`),
# `pkg/daemons/executor/embed.go` (`ETCD`) and etcd `server/etcdserver/server.go`
# (`RemoveMember`, `mayRemoveMember`):
# - The controller is a wrangler handler on the node informer (`nodes.OnChange`,
#   `nodes.OnRemove`): it runs after the API request that changed a node has been answered,
#   from the watch, never inside it. Here it acts `MEMBER_SYNC` seconds after the change, at
#   the first look at the API from then on (`settle`).
# - `sync`, on every change of an etcd node: with `etcd.k3s.cattle.io/remove` "true" and no
#   `etcd.k3s.cattle.io/removed-node-name` yet, `RemovePeer(name, address)` from the node's
#   annotations; once it succeeds the node gets `removed-node-name` = the member's name and
#   loses the name and address annotations. An error leaves the node as it is; the
#   controller retries (here: at every look from then on). When the node names a member
#   again that is not the removed one (its k3s joined again), `sync` resets the request:
#   `removed-node-name` dropped, `remove` set to "false" ("Resetting removed node flag").
# - `RemovePeer` removes the member whose name and address both match (none: nothing to do).
#   etcd commits it only with a majority of the voters running (else the request times
#   out), and its strict reconfiguration check refuses to remove a running voter when the
#   running voters left would be fewer than the quorum of the smaller cluster
#   (`ErrUnhealthy`); a stopped member or a learner may always go.
# - The removed server's etcd reports `ErrMemberRemoved`: k3s writes a `tombstone` into its
#   datastore and exits (k3s-io/k3s#13498, brandond: "K3s on the removed node will exit, and
#   then systemd will restart the process"). raya's `k3s.service` has `Restart=always`,
#   `RestartSec=5s` (src/raya/nodes/templates/snippets/k3s.service.j2): unless it was
#   disabled with `Restart=no` first (`disarmed`), k3s starts again `K3S_RESTART` seconds
#   later, `Register` finds the tombstone, sets the datastore aside, takes a new member name
#   and joins through its `server:` as a learner (the section above), which the leader
#   promotes once it has caught up ("nodes will automatically join the cluster on startup -
#   the first time, or after being deleted. If you don't want it to come back into the
#   cluster, stop and disable the service before deleting the node resource": k3s-io/k3s#5404).
# - Deleting a node (`onRemove`, behind wrangler's finalizer
#   `wrangler.cattle.io/managed-etcd-controller` on every node): the DELETE is answered with
#   the node still there, its `deletionTimestamp` set; `MEMBER_SYNC` later, an etcd node
#   already removed through the annotation goes; another etcd node's member is removed first,
#   and while that fails the node stays. The handler has nothing to do for other nodes: they
#   go at once here.
# - Over SSH (`remote`): `systemctl` on a control plane as raya runs it: a drop-in with
#   `Restart=no` and `systemctl disable` keep its k3s from starting again; `systemctl stop`
#   stops it (its member, if it still is one, is then down). A server that is not running
#   does not answer.

REMOVE = "etcd.k3s.cattle.io/remove"
REMOVED = "etcd.k3s.cattle.io/removed-node-name"
MEMBER_SYNC = 2.0  # seconds from a node's change to the member controller's handling of it
K3S_RESTART = 10.0  # from k3s' exit to its member joining again: RestartSec=5s, then a start


def merge_metadata(node: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A strategic merge patch of labels and annotations: keys set, a null deletes."""
    for key in ("labels", "annotations"):
        current = node["metadata"].setdefault(key, {})
        for name, value in (patch.get(key) or {}).items():
            if value is None:
                current.pop(name, None)
            else:
                current[name] = value


def remove_peer(state: Cluster, node: str, member: str, address: str) -> str | None:
    """`RemovePeer` through etcd's checks: None once removed (or no such member), else
    etcd's error."""
    etcd = state.etcd
    assert etcd is not None, "Etcd.of(cluster, ...) first"
    found = etcd.members.get(node)
    if found is None or found.name != member or etcd.addresses.get(node) != address:
        return None
    voters = [n for n, m in etcd.members.items() if not m.learner]
    running = [n for n in voters if etcd._running(state, n)]
    if len(running) <= len(voters) / 2:
        return "etcdserver: request timed out"
    if node in running and len(running) - 1 < (len(voters) - 1) // 2 + 1:
        return "etcdserver: unhealthy cluster"
    del etcd.members[node]
    now = state.clock()
    machine = state.machines.get(node)
    if machine is None or machine.running:  # its etcd, and k3s with it, stop
        old = machine or Machine()
        stopped = Machine(False, now, old.boot_id, old.kubelet_version, comes_up=False)
        state.machines[node] = etcd.k3s_down[node] = stopped
        if node not in etcd.disarmed:
            etcd.restarting[node] = (stopped, now + K3S_RESTART)
    elif node == etcd.cluster_init and not etcd.guard:  # its server gone: as `Etcd._delete`
        etcd.split.add(node)
        machine.comes_up = False
    state.events.append((now, f"etcd: {node}'s member {member} removed"))
    etcd.count(state, now)
    return None


def restart(state: Cluster, now: float) -> None:
    """The k3s of removed members starting again (`Restart=always`): on the same machine,
    unless its server was deleted meanwhile or raya stopped it; the etcd model then finds no
    member for the node and makes it join as a learner under a new name."""
    etcd = state.etcd
    assert etcd is not None
    for node, (machine, when) in list(etcd.restarting.items()):
        if node in etcd.disarmed or state.machines.get(node) is not machine:
            del etcd.restarting[node]
        elif now >= when:
            del etcd.restarting[node]
            etcd.k3s_down.pop(node, None)
            machine.running, machine.since = True, when
            state.events.append((when, f"{node}: k3s started again (Restart=always)"))


def member_controller(state: Cluster) -> None:
    """`sync` and `onRemove` over every etcd node changed at least `MEMBER_SYNC` ago."""
    etcd = state.etcd
    if etcd is None:
        return
    now = state.clock()
    for name, node in list(state.nodes.items()):
        if now < etcd.changed.get(name, -math.inf) + MEMBER_SYNC:
            continue
        labels, notes = node["metadata"].get("labels") or {}, node["metadata"].get("annotations")
        if ETCD_ROLE not in labels or not notes:
            continue
        if node["metadata"].get("deletionTimestamp"):
            _on_remove(state, name, notes)
            continue
        if REMOVED in notes:
            if notes.get(MEMBER_NAME, notes[REMOVED]) != notes[REMOVED]:
                notes.pop(REMOVED)
                notes[REMOVE] = "false"
                state.events.append((now, f"etcd: {name}'s removal reset: a member again"))
            continue
        if str(notes.get(REMOVE, "")).lower() != "true":
            continue
        member = notes.get(MEMBER_NAME, "")
        error = remove_peer(state, name, member, notes.get(MEMBER_ADDRESS, ""))
        if error:
            state.events.append((now, f"etcd: {name}'s member not removed: {error}"))
            continue
        notes[REMOVED] = member
        notes.pop(MEMBER_NAME, None)
        notes.pop(MEMBER_ADDRESS, None)
    etcd.count(state, now)


def _on_remove(state: Cluster, name: str, notes: Mapping[str, str]) -> None:
    removed = str(notes.get(REMOVE, "")).lower() == "true" and notes.get(REMOVED)
    if not removed:
        error = remove_peer(state, name, notes.get(MEMBER_NAME, ""), notes.get(MEMBER_ADDRESS, ""))
        if error:
            state.events.append((state.clock(), f"node {name} kept by its finalizer: {error}"))
            return
    del state.nodes[name]
    if state.etcd is not None:
        state.etcd.conditions.pop(name, None)
    state.events.append((state.clock(), f"node {name} deleted"))


def delete_node(state: Cluster, name: str) -> tuple[int, dict[str, Any]]:
    """DELETE of a node: an etcd node stays, marked for deletion, until the member
    controller's `onRemove` lets it go (`MEMBER_SYNC` later, at the earliest)."""
    node = state.nodes.get(name)
    if node is None:
        return 404, _status(404, f'nodes "{name}" not found', "NotFound")
    if ETCD_ROLE in (node["metadata"].get("labels") or {}) and state.etcd is not None:
        node["metadata"].setdefault("deletionTimestamp", stamp(state.clock()))
        node["metadata"].setdefault("finalizers", [ETCD_FINALIZER])
        state.etcd.changed[name] = state.clock()
        return 200, node
    del state.nodes[name]
    state.events.append((state.clock(), f"node {name} deleted"))
    return 200, node


def remote(state: Cluster) -> Callable[[str, list[str]], tuple[int, str]]:
    """Runs a command on a node as raya does over SSH (`raya.operate.remove`): `systemctl`
    on its k3s, as the section above says; anything else fails as an unknown command."""

    def run(node: str, command: list[str]) -> tuple[int, str]:
        with state.lock:
            state.settle()
            etcd, machine = state.etcd, state.machines.get(node)
            assert etcd is not None
            up = machine is None or machine.running or etcd.k3s_down.get(node) is machine
            if not up:
                return 255, f"ssh: connect to host {node} port 22: Connection timed out"
            text = " ".join(command)
            state.events.append((state.clock(), f"{node}: ran {text}"))
            if "Restart=no" in text and "systemctl disable k3s.service" in text:
                etcd.disarmed.add(node)
                return 0, ""
            if text == "systemctl stop k3s.service":
                etcd.disarmed.add(node)  # stopped by hand: Restart= does not apply
                old = machine or Machine()
                state.machines[node] = etcd.k3s_down[node] = Machine(
                    False, state.clock(), old.boot_id, old.kubelet_version, comes_up=False
                )
                return 0, ""
            return 127, f"{text}: command not found"

    return run
