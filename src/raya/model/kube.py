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
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
    }
)
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
    namespace = key.rpartition("/")[0]
    if (
        _suffixed(namespace, _RESERVED_NAMESPACES)
        and key not in _KUBELET_LABELS
        and not _suffixed(namespace, _KUBELET_NAMESPACES)
    ):
        return (
            f"key {key!r}: a kubelet may set no such label on itself (accepted in "
            "kubernetes.io and k8s.io: node.kubernetes.io/*, kubelet.kubernetes.io/*, and "
            "well-known ones such as topology.kubernetes.io/zone)"
        )
    return None


def taint_problem(taint: object) -> str | None:
    """What the kubelet refuses in `taint` (`key[=value]:Effect`), or None."""
    if not isinstance(taint, str) or ":" not in taint:
        return f"{taint!r} is not key[=value]:Effect"
    spec, _, effect = taint.rpartition(":")
    if effect not in TAINT_EFFECTS:
        return f"{taint!r}: effect {effect!r}; accepted: {', '.join(TAINT_EFFECTS)}"
    key, _, value = spec.partition("=")
    problem = key_problem(key) or value_problem(value)
    return f"{taint!r}: {problem}" if problem else None


def taint_identity(taint: str) -> tuple[str, str]:
    """Key and effect: what makes two taints the same for Kubernetes."""
    spec, _, effect = taint.rpartition(":")
    return spec.partition("=")[0], effect
