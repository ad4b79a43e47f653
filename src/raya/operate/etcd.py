"""k3s' embedded etcd, as the Kubernetes API shows it: one member per control plane.

k3s puts what it knows of each member on the member's node (k3s `pkg/etcd`): the label
`node-role.kubernetes.io/etcd`, the annotation `etcd.k3s.cattle.io/node-name` with the member's
name (`<node>-<8 hex>`, kept on the server's volume: the same after a replacement that kept
its volume), and the condition `EtcdIsVoter` that the etcd leader writes every 15 s
(`manageLearners`, `setEtcdStatusCondition`): True `MemberNotLearner` for a voter, False
`MemberIsLearner` (joined, not yet promoted), `Unhealthy` (its status cannot be read: its
server is down) or `NotAMember`. Without quorum there is no leader and nothing is written, so
a condition can be stale: a member counts as healthy only when its node is Ready too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

ETCD_ROLE = "node-role.kubernetes.io/etcd"
MEMBER_NAME = "etcd.k3s.cattle.io/node-name"
CONDITION = "EtcdIsVoter"
STATES = {"MemberNotLearner": "voter", "MemberIsLearner": "learner", "Unhealthy": "unhealthy",
          "NotAMember": "not a member"}  # fmt: skip


@dataclass(frozen=True)
class Member:
    node: str
    state: str  # voter, learner, unhealthy, not a member, missing (no node), no etcd status
    ready: bool  # the node's Ready condition
    name: str  # the member's name, "" if the node has none
    detail: str  # the condition's message, or why there is none

    @property
    def voter(self) -> bool:
        return self.state == "voter"

    @property
    def healthy(self) -> bool:
        return self.voter and self.ready

    def describe(self) -> str:
        ready = "Ready" if self.ready else "not Ready"
        named = f", member {self.name}" if self.name else ""
        if self.voter:
            return f"voter, {ready}{named}"
        return f"{self.state}, {ready}{named}: {self.detail}"


def _condition(node: Any, kind: str) -> Any | None:
    return next((c for c in node.status.conditions or [] if c.type == kind), None)


def member(name: str, node: Any | None) -> Member:
    """The member on `node` (the client's V1Node), or missing when there is no node."""
    if node is None:
        return Member(name, "missing", False, "", "no node object: not registered")
    ready = _condition(node, "Ready")
    is_ready = ready is not None and ready.status == "True"
    member_name = (node.metadata.annotations or {}).get(MEMBER_NAME, "")
    found = _condition(node, CONDITION)
    if found is None:
        return Member(name, "no etcd status", is_ready, member_name, "k3s has not reported it")
    state = "voter" if found.status == "True" else STATES.get(found.reason, found.reason or "?")
    return Member(name, state, is_ready, member_name, found.message or "")


def members(nodes: Iterable[Any], control_planes: Sequence[str]) -> list[Member]:
    """Each control plane's member, in their order, then any other node labelled as an etcd
    member (one the fleet no longer has)."""
    by_name = {node.metadata.name: node for node in nodes}
    others = sorted(
        name
        for name, node in by_name.items()
        if name not in control_planes and (node.metadata.labels or {}).get(ETCD_ROLE) == "true"
    )
    return [member(name, by_name.get(name)) for name in [*control_planes, *others]]


def replacement_problem(found: Iterable[Member], name: str) -> str | None:
    """Why replacing control plane `name` now could cost etcd its quorum, or None: every other
    member must be a voter on a Ready node, so that etcd keeps its quorum while `name` is
    gone. `name` itself may be in any state: replacing a member that is down or not voting
    loses nothing more. The one rule of every path that replaces a control plane (`raya
    roll`, `raya up --replace`)."""
    for other in found:
        if other.node != name and not other.healthy:
            return (
                f"{other.node} is {other.describe()}; replacing {name} needs every other "
                "control plane Ready and a voting etcd member, or etcd could lose its quorum"
            )
    return None
