"""Where the Kubernetes scheduler may put a pod, by the two rules raya's add-ons place theirs
with, and the labels and taints k3s registers each node with, read from its rendered config.

Written from the real systems' source:
- The NodeAffinity filter: a pod fits a node only if every key of its `nodeSelector` is a label
  of the node with that value (kubernetes/kubernetes,
  pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, `Filter`;
  k8s.io/component-helpers/scheduling/corev1/nodeaffinity, `GetRequiredNodeAffinity`,
  `Match`: the selector as a label set, `labels.SelectorFromSet`).
- The TaintToleration filter: a pod fits a node only if each of the node's taints of effect
  NoSchedule or NoExecute is tolerated (pkg/scheduler/framework/plugins/tainttoleration/
  taint_toleration.go, `Filter`; component-helpers `FindMatchingUntoleratedTaint`); a
  toleration tolerates a taint (k8s.io/api/core/v1/toleration.go, `ToleratesTaint`) when its
  effect is empty or the taint's, its key empty (operator Exists: every key) or the taint's,
  and, operator Exists, any value; operator Equal or empty, the taint's value.
- k3s registers a node with its config's `node-label` and `node-taint` (`key[=value]:Effect`;
  k3s-io/k3s pkg/agent/config, kubelet's `--node-labels` and `--register-with-taints`), and
  labels a server's node `node-role.kubernetes.io/control-plane` and `.../master` "true"
  (pkg/server/server.go, `setNodeLabelsAndAnnotations`) and `.../etcd` "true" with embedded
  etcd (pkg/etcd/metadata_controller.go, `handleSelf`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

K3S_CONFIG = "/etc/rancher/k3s/config.yaml"
SERVER_LABELS = {
    "node-role.kubernetes.io/control-plane": "true",
    "node-role.kubernetes.io/master": "true",
    "node-role.kubernetes.io/etcd": "true",
}
FILTERED_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class RegisteredNode:
    """A node as the API shows it once k3s registered it."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]


def parse_taint(text: str) -> Taint:
    """k3s' `key[=value]:Effect`."""
    spec, _, effect = text.rpartition(":")
    key, _, value = spec.partition("=")
    return Taint(key, value, effect)


def registered(name: str, k3s_config: bytes, *, server: bool) -> RegisteredNode:
    """The node k3s registers from its rendered `config.yaml`."""
    config = yaml.safe_load(k3s_config)
    labels = dict(label.split("=", 1) for label in config.get("node-label", []))
    if server:
        labels.update(SERVER_LABELS)
    taints = tuple(parse_taint(taint) for taint in config.get("node-taint", []))
    return RegisteredNode(name, labels, taints)


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.effect:
        return False
    key = toleration.get("key", "")
    if key and key != taint.key:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and toleration.get("value", "") == taint.value


def fits(pod_spec: Mapping[str, Any], node: RegisteredNode) -> bool:
    """Whether the scheduler's NodeAffinity and TaintToleration filters let the pod on."""
    selector = pod_spec.get("nodeSelector") or {}
    if any(node.labels.get(key) != value for key, value in selector.items()):
        return False
    tolerations: Sequence[Mapping[str, Any]] = pod_spec.get("tolerations") or []
    return all(
        any(tolerates(toleration, taint) for toleration in tolerations)
        for taint in node.taints
        if taint.effect in FILTERED_EFFECTS
    )
