"""The cluster autoscaler 1.36.1 (the release raya runs, raya.nodes.autoscaler.VERSION) with its
Hetzner provider, for one node group, as `raya roll`, `raya destroy`, `raya status` and `raya
up` meet it; written from kubernetes/autoscaler at tag cluster-autoscaler-1.36.1, not from what
raya expects. First written from 1.35.0; what the provider changed up to 1.36.1
(`git log cluster-autoscaler-1.35.0..cluster-autoscaler-1.36.1 -- cluster-autoscaler/
cloudprovider/hetzner`): `createServer` labels a server with its group's `serverLabels` too
(commits 8d0c691dee, 32ea056b95: below); `NodeGroupForNode` answers no group for a nil one
(`hetzner_cloud_provider.go`; a node of no group is never one this double deletes either);
the provider registers itself with the builder (`init`, `builder.RegisterCloudProvider`:
how `--cloud-provider=hetzner` finds it, nothing a server shows); and in the core, which
missing nodes count as upcoming (`GetUpcomingNodes`, below). Each rule, as at 1.36.1:

- It acts once every `--scan-interval` (10 s, `config/flags/flags.go`; `main.go`, `run`, and
  `loop/trigger.go`, `Wait`: sooner after a productive loop or a new unschedulable pod, which
  this model does not), as time passes (`tick`, called by the test's clock), never inside a
  request. A new pod acts only once it holds the leader lease (`--leader-elect`, on by
  default; the old pod's lease lasts 15 s, `leader-elect-lease-duration`): its first loop is
  modelled one interval after it starts, so the pod is Ready before it acts.
- Its provider reads the cluster config (`HCLOUD_CLUSTER_CONFIG`, from the Secret, through the
  environment) when it starts only (`cloudprovider/hetzner/hetzner_manager.go`, `newManager`),
  and counts the group's servers (label `hcloud/node-group`) for its target size then
  (`hetzner_cloud_provider.go`, `BuildHetzner`: `targetSize: len(servers)`); afterwards only
  its own `IncreaseSize`/`DeleteNodes` count them again (`hetzner_node_group.go`,
  `resetTargetSize`); `Refresh` does nothing (`hetzner_manager.go`).
- Scale-up (`core/static_autoscaler.go`, `RunOnce`): with `--enforce-node-group-min-size`
  a target under the group's min is raised to it (`ScaleUpToNodeGroupMinSize`); pods pending
  (no node) make it add a node only when none is upcoming, never beyond max (`IncreaseSize`:
  "size increase is too large"). Upcoming (`clusterstate/clusterstate.go`,
  `GetUpcomingNodes`): target minus registered nodes, counted since 1.36 (commit
  251652c2ee, "Fix UpcomingNodes counting nodes for groups with no active scale-up") only
  while the group has an active scale-up request: one its own scale-up registered, in
  memory, removed by `updateScaleRequests` once no node is upcoming (or after
  `--max-node-provision-time`, 15 min, which no test here reaches). So a server deleted
  behind its back leaves a target that still counts it, but with no request active the
  missing node is not upcoming and pending pods do get a new one. The Kubernetes stand-in
  has no capacity: one node takes every pending pod.
- `createServer` (`hetzner_node_group.go`): named `<group>-<random hex>` (`newNodeName`),
  labelled as `server_labels` says, from the newest available snapshot of the type's
  architecture matching the config's `imagesForArch` (`findImage`: label selector, status
  available, `created:desc`), with the group's `cloudInit`, and the firewall
  `HCLOUD_FIREWALL` names applied directly only if that variable is set in its environment
  (`hetzner_manager.go`, `newManager`: unset, no firewall is looked up; `createServer`:
  `opts.Firewalls` only for one found): `create_server`, `env`. The server boots (the
  Kubernetes stand-in's machine) and registers a Node of its name.
- Scale-down (`core/scaledown`): a Ready node of the group with no pod but DaemonSet and mirror
  ones, unneeded for `--scale-down-unneeded-time`, is deleted: tainted
  `ToBeDeletedByClusterAutoscaler` (`utils/taints`), its server deleted (`DeleteNodes` ->
  `deleteByNode`), the target counted again; never a node annotated
  `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`
  (`scaledown/eligibility/eligibility.go`, `HasNoScaleDownAnnotation`), never below min
  (`DeleteNodes`: "size decrease is too large").
- Its Deployment (the Deployment controller's part): a pod template change (a new
  `metadata.generation`) is rolled out `restart_seconds` later: the new pod starts (the
  provider as above) and the status says so (`observedGeneration`, `updatedReplicas`,
  `availableReplicas`); until then the old pod goes on, with its old config and count.
"""

from __future__ import annotations

import base64
import datetime
import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import yaml

from raya.nodes.autoscaler import NODE_GROUP_LABEL, node_config_digests
from tests.cloud.program.hetzner import Hetzner
from tests.cloud.program.mocks import Snapshot
from tests.operate import kube_api as ka

SCAN_INTERVAL = 10.0
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
ARCHITECTURES = {"x86": "amd64", "arm": "arm64"}


def deployment(digest: str) -> dict[str, Any]:
    """The chart's Deployment, rolled out, its pods annotated with the config `digest`."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "cluster-autoscaler-hetzner-cluster-autoscaler",
                     "namespace": "kube-system", "generation": 1},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "hetzner-cluster-autoscaler"}},
            "template": {"metadata": {"annotations": {"raya/cluster-config-sha256": digest}}},
        },
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                   "readyReplicas": 1, "availableReplicas": 1},
    }  # fmt: skip


@dataclass
class Autoscaler:
    kube: ka.Cluster
    hetzner: Hetzner
    snapshots: list[Snapshot]
    group: str
    min_size: int
    max_size: int
    kubelet_version: str
    server_type: str = "cpx31"
    deployment_path: str = (
        "/apis/apps/v1/namespaces/kube-system/deployments/"
        "cluster-autoscaler-hetzner-cluster-autoscaler"
    )
    secret_path: str = "/api/v1/namespaces/kube-system/secrets/raya-cluster-autoscaler"
    restart_seconds: float = 20.0
    unneeded_time: float = 600.0
    target: int = 0
    config: dict[str, Any] = field(default_factory=dict)  # read at its start
    # Its environment: the chart's `extraEnv` (tests/cloud/program/test_autoscaler.py,
    # `deployed_env`: what raya deploys).
    env: dict[str, str] = field(default_factory=dict)
    starts: list[float] = field(default_factory=list)
    # Each server it made: (name, the digest of its group's node config then, image id).
    made: list[tuple[str, str, int]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # the servers its scale-down deleted
    _scan_at: float = 0.0
    _scale_up_requested: bool = False  # `scaleUpRequests` holds the group (in memory)
    _restart_at: float | None = None
    _unneeded: dict[str, float] = field(default_factory=dict)
    _random: random.Random = field(default_factory=lambda: random.Random(39))

    def servers(self) -> list[Any]:
        return [s for s in self.hetzner.servers.values()
                if s.labels.get(NODE_GROUP_LABEL) == self.group]  # fmt: skip

    def start(self) -> None:
        """A new pod: the config from the Secret, the group's servers counted."""
        secret = self.kube.objects[self.secret_path]
        text = base64.b64decode(secret["data"]["cluster-config"]).decode()
        self.config = cluster_config(text)
        self.target = len(self.servers())
        self._scale_up_requested = False
        self.starts.append(self.kube.clock())
        self._scan_at = self.kube.clock() + SCAN_INTERVAL

    def tick(self) -> None:
        now = self.kube.clock()
        self._rollout(now)
        while self._scan_at <= now:
            self._scan(self._scan_at)
            self._scan_at += SCAN_INTERVAL

    def _rollout(self, now: float) -> None:
        found = self.kube.objects[self.deployment_path]
        generation, status = found["metadata"]["generation"], found["status"]
        if status["observedGeneration"] < generation and self._restart_at is None:
            self._restart_at = now + self.restart_seconds
            status.update(observedGeneration=generation, updatedReplicas=0, replicas=2)
        if self._restart_at is not None and now >= self._restart_at:
            self._restart_at = None
            self.start()
            status.update(updatedReplicas=1, replicas=1, availableReplicas=1, readyReplicas=1)

    def _scan(self, now: float) -> None:
        self.hetzner.settle()
        nodes = self.kube.nodes
        names = {s.name for s in self.servers()}
        registered = [n for n in names if n in nodes]
        pending = [p for p in self.kube.pods if not p["spec"].get("nodeName")]
        if self._scale_up_requested and self.target - len(registered) <= 0:
            self._scale_up_requested = False  # `updateScaleRequests`: finished
        upcoming = self.target - len(registered) if self._scale_up_requested else 0
        if self.target < self.min_size:
            self._increase(self.min_size - self.target, now)
        elif pending and upcoming <= 0 and self.target < self.max_size:
            self._increase(1, now)
        for name in sorted(registered):
            node = nodes[name]
            busy = any(
                p["spec"].get("nodeName") == name and not _stays(p) for p in self.kube.pods
            )
            kept = node["metadata"].get("annotations", {}).get(SCALE_DOWN_DISABLED) == "true"
            if busy or kept or not ka._node_ready(node) or self.target <= self.min_size:
                self._unneeded.pop(name, None)
                continue
            since = self._unneeded.setdefault(name, now)
            if now - since >= self.unneeded_time:
                node["spec"].setdefault("taints", []).append(
                    {"key": TO_BE_DELETED, "effect": "NoSchedule"}
                )
                server = self.hetzner.server_named(name)
                assert server is not None
                self.hetzner.delete_server(server.id)
                self.deleted.append(name)
                self.target = len(self.servers())

    def _increase(self, count: int, now: float) -> None:
        config = self.config["nodeConfigs"][self.group]
        digest = node_config_digests(self.config)[self.group]
        architecture = ka_architecture(self.server_type)
        selector = self.config["imagesForArch"][ARCHITECTURES[architecture]]
        image = newest(self.snapshots, selector, architecture)
        for _ in range(count):
            name = f"{self.group}-{self._random.getrandbits(63):x}"
            server = create_server(self.hetzner, self.config, self.env, self.group, name)
            server.image, server.server_type = image, self.server_type
            server.created = (ka.EPOCH + datetime.timedelta(seconds=now)).isoformat()
            self.kube.machines[name] = ka.Machine(
                running=False, since=now, boot_id=str(uuid.uuid4()),
                kubelet_version=self.kubelet_version,
            )  # fmt: skip
            self.kube.servers[name] = server.id
            self.made.append((name, digest, image))
            assert config["cloudInit"]  # what the server boots from
        self.target = len(self.servers())
        self._scale_up_requested = True  # `RegisterScaleUp`


def provider_env(manifests: str) -> dict[str, str]:
    """The provider's plain environment from raya's manifests (`raya.nodes.autoscaler.
    manifests`): the HelmChart's `extraEnv`, which the chart makes the container's `env`
    by name (`templates/deployment.yaml`); the Secret's (`extraEnvSecrets`) are the token
    and the cluster config, read apart."""
    chart = next(d for d in yaml.safe_load_all(manifests) if d["kind"] == "HelmChart")
    values = yaml.safe_load(chart["spec"]["valuesContent"])
    return {str(k): str(v) for k, v in (values.get("extraEnv") or {}).items()}


def cluster_config(encoded: str) -> dict[str, Any]:
    """`HCLOUD_CLUSTER_CONFIG` as the provider reads it (`hetzner_manager.go`, `newManager`:
    `base64.StdEncoding.DecodeString`, then `json.Unmarshal` into `ClusterConfig`)."""
    return dict(json.loads(base64.b64decode(encoded, validate=True)))


def _field(document: dict[str, Any], name: str) -> Any:
    """A `ClusterConfig` field as `json.Unmarshal` finds it: the struct has no json tags, so
    a key matches the field's name case-insensitively (`encoding/json`, `Unmarshal`)."""
    return next((value for key, value in document.items() if key.lower() == name.lower()), None)


def server_labels(config: dict[str, Any], group: str) -> dict[str, str]:
    """The labels `createServer` gives a new server of `group` (`hetzner_node_group.go` at tag
    cluster-autoscaler-1.36.1): with a cluster config (`HCLOUD_CLUSTER_CONFIG`, so
    `IsUsingNewFormat`, `newManager`) its node config's `serverLabels` copied
    (`maps.Copy`), then `nodeGroupLabel` (`hcloud/node-group`) set to the group over them;
    nothing else."""
    node_configs = _field(config, "nodeConfigs") or {}
    # The group's id is the map's key, exactly; never missing: `BuildHetzner` refuses a group
    # without a node config ("No node config present for node group id").
    node_config = node_configs[group]
    labels = {str(k): str(v) for k, v in (_field(node_config, "serverLabels") or {}).items()}
    labels[NODE_GROUP_LABEL] = group
    return labels


def create_server(
    hetzner: Hetzner,
    config: dict[str, Any],
    env: dict[str, str],
    group: str,
    name: str,
    private_ips: tuple[str, ...] = (),
) -> Any:
    """The server `createServer` asks Hetzner for (`hcloud.ServerCreateOpts`): `Labels`
    (`server_labels`), and `Firewalls` the one `HCLOUD_FIREWALL` names in the provider's
    environment `env`, only if set (`newManager`: looked up by name or id only when the
    variable is not empty; `createServer`: `opts.Firewalls` only when one was found)."""
    firewall = env.get("HCLOUD_FIREWALL")
    firewalls = (firewall,) if firewall else ()
    return hetzner.create_server(name, private_ips, server_labels(config, group), firewalls)


def ka_architecture(server_type: str) -> str:
    """Hetzner's architecture of a server type: `cax` types are Arm64."""
    return "arm" if server_type.startswith("cax") else "x86"


def newest(snapshots: list[Snapshot], selector: str, architecture: str) -> int:
    """`findImage`'s label selector search: available, this architecture, the newest."""
    wanted = dict(term.split("=", 1) for term in selector.split(","))
    found = [
        s for s in snapshots
        if s.status == "available" and s.architecture == architecture
        and all(s.labels.get(k) == v for k, v in wanted.items())
    ]  # fmt: skip
    if not found:
        raise AssertionError(f"unable to find image {selector} with architecture {architecture}")
    return max(found, key=lambda s: s.created).id


def _stays(pod: dict[str, Any]) -> bool:
    """DaemonSet and mirror pods do not keep a node from scale-down."""
    kind, _ = ka._controller(pod)
    return kind == "DaemonSet" or "kubernetes.io/config.mirror" in (
        pod["metadata"].get("annotations") or {}
    )
