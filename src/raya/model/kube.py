"""Node labels and taints as k3s hands them to the kubelet (`node-label`, `node-taint`): the
syntax Kubernetes validates, checked here so a typo fails before a node boots.

Sources: k8s.io/apimachinery `pkg/util/validation/validation.go` (IsQualifiedName,
IsValidLabelValue, IsDNS1123Subdomain), k8s.io/kubernetes `pkg/util/taints/taints.go`
(parseTaint: `key[=value]:effect`, unique by key and effect) and k8s.io/kubelet
`pkg/apis/well_known_labels.go` (the `kubernetes.io` and `k8s.io` labels a kubelet may set on
itself: any other there stops it at start, "unknown 'kubernetes.io' or 'k8s.io' labels").
"""

from __future__ import annotations

import re

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_NAME_MAX = 63
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SUBDOMAIN_MAX = 253
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The kubelet's own labels (k8s.io/kubelet `pkg/apis/well_known_labels.go`, KubeletLabels):
# accepted in `node-labels`, but each is a fact about the node that something else states.
# The kubelet sets hostname, os and arch itself at registration (k8s.io/kubernetes
# `pkg/kubelet/kubelet_node_status.go`, `initialNode`, `updateDefaultLabels`), and with
# `cloud-provider=external` the cloud controller sets instance type, zone and region from
# Hetzner's answer (k8s.io/cloud-provider `controllers/node/node_controller.go`,
# `getNodeModifiersFromCloudProvider`): a declared value would contradict the one the
# scheduler and the CSI driver's topology act on, or be overwritten.
_SET_BY_KUBELET = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
                   "beta.kubernetes.io/os", "beta.kubernetes.io/arch")
_SET_BY_CLOUD = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
                 "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                 "failure-domain.beta.kubernetes.io/zone",
                 "failure-domain.beta.kubernetes.io/region")  # fmt: skip
# Taints Kubernetes itself puts on and takes off nodes by their state: the node lifecycle
# controller's `node.kubernetes.io/*` (not-ready, unreachable, unschedulable, the pressure
# ones: k8s.io/api `core/v1/well_known_taints.go`) and the cloud controller's
# `node.cloudprovider.kubernetes.io/*` (uninitialized, removed once it has initialised the
# node; shutdown). Declared at registration, one would be removed or would mark a healthy
# node as broken.
_MANAGED_TAINT_NAMESPACES = ("node.kubernetes.io", "node.cloudprovider.kubernetes.io")
_KUBELET_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_RESERVED_NAMESPACES = ("kubernetes.io", "k8s.io")


def _suffixed(namespace: str, domains: tuple[str, ...]) -> bool:
    return any(namespace == d or namespace.endswith(f".{d}") for d in domains)


def key_problem(key: object) -> str | None:
    """What Kubernetes refuses in `key` as a label or taint key, or None."""
    if not isinstance(key, str):
        return f"{key!r} is not text"
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > _NAME_MAX or not _NAME.fullmatch(name):
        return (
            f"key {key!r}: its name must be 1-63 letters, digits, '-', '_' or '.', "
            "alphanumeric at both ends"
        )
    if "/" in key and (len(prefix) > _SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(prefix)):
        return f"key {key!r}: its prefix must be a lowercase DNS subdomain such as example.com"
    return None


def value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"value {value!r} is not text"
    if value and (len(value) > _NAME_MAX or not _NAME.fullmatch(value)):
        return (
            f"value {value!r}: at most 63 letters, digits, '-', '_' or '.', "
            "alphanumeric at both ends (or empty)"
        )
    return None


def label_problem(key: object, value: object) -> str | None:
    """What k3s' kubelet refuses in the node label `key=value`, or None."""
    problem = key_problem(key) or value_problem(value)
    if problem or not isinstance(key, str):
        return problem
    if key in _SET_BY_KUBELET:
        return (
            f"key {key!r}: set by the kubelet itself from the node (kubelet_node_status.go, "
            "initialNode); accepted: a label of your own prefix such as example.com/role"
        )
    if key in _SET_BY_CLOUD:
        return (
            f"key {key!r}: set by the cloud controller from Hetzner's answer "
            "(cloud-provider's node controller); accepted: a label of your own prefix such "
            "as example.com/role"
        )
    namespace = key.rpartition("/")[0]
    if _suffixed(namespace, _RESERVED_NAMESPACES) and not _suffixed(
        namespace, _KUBELET_NAMESPACES
    ):
        return (
            f"key {key!r}: a kubelet may set no such label on itself (NodeRestriction and the "
            "kubelet's --node-labels check: in kubernetes.io and k8s.io only "
            "node.kubernetes.io/* and kubelet.kubernetes.io/*)"
        )
    return None


def taint_problem(taint: object) -> str | None:
    """What the kubelet refuses in `taint` (`key[=value]:Effect`), or what Kubernetes would
    take off or misread in it; None if nothing."""
    if not isinstance(taint, str) or ":" not in taint:
        return f"{taint!r} is not key[=value]:Effect"
    spec, _, effect = taint.rpartition(":")
    if effect not in TAINT_EFFECTS:
        return f"{taint!r}: effect {effect!r}; accepted: {', '.join(TAINT_EFFECTS)}"
    key, _, value = spec.partition("=")
    problem = key_problem(key) or value_problem(value)
    if problem:
        return f"{taint!r}: {problem}"
    if key.rpartition("/")[0] in _MANAGED_TAINT_NAMESPACES:
        return (
            f"{taint!r}: key {key!r} is one Kubernetes sets and removes by the node's state "
            "(node lifecycle and cloud controllers); accepted: a key of your own prefix such "
            "as example.com/dedicated"
        )
    return None


def repels(taint: str) -> bool:
    """Whether `taint` keeps off a pod that does not tolerate it (NoSchedule, NoExecute);
    PreferNoSchedule only steers the scheduler away while other nodes fit."""
    return taint_identity(taint)[1] in ("NoSchedule", "NoExecute")


def taint_identity(taint: str) -> tuple[str, str]:
    """Key and effect: what makes two taints the same for Kubernetes."""
    spec, _, effect = taint.rpartition(":")
    return spec.partition("=")[0], effect
