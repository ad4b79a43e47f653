"""Removing nodes the inputs no longer declare, never by a bare delete: what `raya up` does
around the Pulumi update that deletes their servers (raya.cloud.deploy, `Removal`).

Before the update, every leaving node is cordoned and drained through the API as the roll
drains an agent (evictions honour PodDisruptionBudgets; `raya.operate.roll.Drain`), then
each leaving control plane's etcd member is removed, one at a time, each only while the
members that stay keep a quorum. Right before Pulumi deletes the servers, the members are
read again (`confirm`). After the update, the leaving nodes' objects are deleted.
Anything refused (a drain that does not finish, a member etcd will not let go, a quorum
that would be lost, a removed member back) stops `raya up` before Pulumi runs: no server
is deleted.

A removed member does not stay away by itself: its etcd reports the removal, k3s writes a
tombstone and exits (k3s `pkg/daemons/executor/embed.go`, `ETCD`), systemd starts it again
(raya's `k3s.service` has `Restart=always`), and k3s, finding the tombstone, sets its
datastore aside and joins again through its `server:` as a learner, soon a voter (k3s
`pkg/etcd/etcd.go`, `Register`; the maintainers in k3s-io/k3s#5404: "stop and disable the
service before deleting"). For 3 -> 1 both leaving members could be voters again when their
servers go: one voter of three left. So before its member is removed, k3s on a leaving
control plane is disabled over SSH (`DISARM`: not enabled at boot, `Restart=no`, no start
at all), and stopped once the member is gone (`STOP`). Not stopped before: a member that
is stopped still counts among the voters, so going from two members to one would lose the
quorum (one running of two) and etcd could not commit the removal. Not shut down through
Hetzner instead, for the same reason; and a removal over the API alone leaves k3s to
restart within its `RestartSec`, racing the server's deletion. Once the last member is
removed, raya watches `watch` seconds (longer than k3s takes to start again and join)
and refuses if any of them is back.

k3s removes a member through the Kubernetes API (k3s-io/k3s `pkg/etcd/member_controller.go`,
`etcdMemberHandler.sync`): on a node labelled `node-role.kubernetes.io/etcd` whose
annotation `etcd.k3s.cattle.io/remove` is `true`, it calls `RemovePeer` (`pkg/etcd/etcd.go`)
with the member name and address the node's `etcd.k3s.cattle.io/node-name` and `-address`
annotations hold, then records `etcd.k3s.cattle.io/removed-node-name` and drops those two.
That record is what raya waits for. Deleting the node object also removes its member
(`onRemove`, behind a finalizer), but only while the object exists does raya see the
removal happen: so the annotation first, with the server still there, and the node object
deleted once the server is gone (`onRemove` then finds the member already removed).

A member is healthy when its node is Ready and k3s' `EtcdIsVoter` condition on it is True
(`raya.operate.etcd`, as the roll reads it: k3s `pkg/etcd/etcd.go`,
`setEtcdStatusCondition`). etcd commits a membership
change only with a quorum (`n // 2 + 1` of its members) and, by default, refuses to remove a
started member when the healthy ones left would be fewer than the quorum of the smaller
cluster (etcd `server/etcdserver/server.go`, `mayRemoveMember`, strict reconfiguration
check): raya checks the same before each removal, and all of them before the first change,
removing unhealthy members (which etcd lets go at any time) before healthy ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raya.cloud.kubeconfig import reason
from raya.defaults import DRAIN_TIMEOUT, WITHOUT_DRAIN
from raya.errors import RayaError
from raya.operate import etcd
from raya.operate.roll import (
    POLL,
    Clock,
    Drain,
    Kubernetes,
    is_control_plane,
    stranded,
)

REMOVE = "etcd.k3s.cattle.io/remove"
REMOVED = "etcd.k3s.cattle.io/removed-node-name"
MEMBER_TIMEOUT = 120.0  # seconds for k3s to remove a member once asked (its RemovePeer: 1 min)
# From the last removal until the members are read for the last time: k3s starts again 5 s
# after it exits (RestartSec) and joins within seconds; well after that.
COMEBACK_WATCH = 30.0
K3S_UNIT = "k3s.service"
# Run as root on a leaving control plane before its member is removed: k3s keeps running,
# and voting, until then; once removed it exits and must not start again, through
# Restart=always, a reboot, or anything that asks for a start (the runtime drop-in's
# condition fails every start).
LEAVING_DROPIN = f"/run/systemd/system/{K3S_UNIT}.d/99-raya-leaving.conf"
DISARM = [
    "sh",
    "-c",
    f"mkdir -p {LEAVING_DROPIN.rsplit('/', 1)[0]} && printf '%s\\n' '[Unit]' "
    "'ConditionPathExists=/run/raya-k3s-leaving-never' '[Service]' 'Restart=no' "
    f">{LEAVING_DROPIN} && systemctl daemon-reload && systemctl disable {K3S_UNIT}",
]
STOP = ["systemctl", "stop", K3S_UNIT]
# Runs a command as root on a node (by name) over SSH pinned to its deployed host key:
# its exit code and what it printed.
Remote = Callable[[str, Sequence[str]], tuple[int, str]]


class RemovalError(RayaError):
    """Leaving nodes could not be drained or their members removed: nothing was deleted."""


def quorum(members: int) -> int:
    return members // 2 + 1


def removal_order(leaving: Sequence[str], health: Mapping[str, str]) -> list[str]:
    """The leaving control planes with a node (`health` holds them) in the order their members
    go: unhealthy ones first, then the highest numbers first."""
    planes = [name for name in leaving if is_control_plane(name) and name in health]
    return sorted(planes, key=lambda name: (not health.get(name), _number(name)))


def _number(name: str) -> int:
    # control-plane-4 before control-plane-3: sorting ascending on the negated number.
    tail = name.rsplit("-", 1)[-1]
    return -int(tail) if tail.isdigit() else 0


def quorum_problem(health: Mapping[str, str], order: Sequence[str]) -> str | None:
    """Why removing the members `order`, one at a time, would leave etcd without a quorum at
    some step, or None. `health` holds every member (control plane) and why it is not
    healthy ('' when it is)."""
    members = dict(health)
    for step in [None, *order]:
        if step is not None:
            del members[step]
        healthy = sum(1 for why in members.values() if not why)
        if healthy < quorum(len(members)):
            sick = ", ".join(f"{name} ({why})" for name, why in sorted(members.items()) if why)
            where = f"after removing {step}" if step else "now"
            return (
                f"etcd would be without quorum {where}: {healthy} healthy of {len(members)} "
                f"members, {quorum(len(members))} needed; not healthy: {sick or 'none'}"
            )
    return None


@dataclass(kw_only=True)
class Removal:
    """The hooks `raya.cloud.deploy.run` calls around an update that deletes nodes. `connect`
    gives the API from the stack's kubeconfig; `without_drain` (`--delete-without-drain`)
    lets nodes go undrained when the API cannot be reached."""

    connect: Callable[[str], Kubernetes]
    say: Callable[[str], None]
    remote: Remote
    clock: Clock = field(default_factory=Clock)
    drain_timeout: float = DRAIN_TIMEOUT
    accept_local_loss: bool = False
    # `--accept-volume-downtime`: delete the last nodes where pods' Hetzner Volumes are.
    accept_volume_downtime: bool = False
    without_drain: bool = False
    member_timeout: float = MEMBER_TIMEOUT
    watch: float = COMEBACK_WATCH
    drainer: Drain | None = None  # once the API answered: then the node objects go after
    removed: dict[str, str] = field(default_factory=dict)  # node -> its removed member
    last_removal: float = 0.0

    def drainer_of(self) -> Drain:
        assert self.drainer is not None, "before() connects first"
        return self.drainer

    @property
    def kube(self) -> Kubernetes:
        return self.drainer_of().kube

    def before(self, leaving: Sequence[str], kubeconfig: str | None) -> None:
        try:
            if kubeconfig is None:
                raise RemovalError("the stack has no kubeconfig output")
            kube = self.connect(kubeconfig)
            nodes = {node.metadata.name: node for node in kube.nodes()}
        except Exception as error:  # the API client's, whatever their kind
            why = str(error) if isinstance(error, RayaError) else reason(error)
            if not self.without_drain:
                raise RemovalError(
                    f"cannot reach the Kubernetes API ({why}) to drain {', '.join(leaving)} "
                    "and remove their etcd members before their servers are deleted; nothing "
                    f"changed. Run again once it answers, or pass {WITHOUT_DRAIN} to delete "
                    "them undrained (docs/deploy.md, Removing nodes)"
                ) from None
            self.say(
                f"the Kubernetes API does not answer ({why}); deleting {', '.join(leaving)} "
                f"undrained, as {WITHOUT_DRAIN} asks: delete their node objects once the API "
                "answers (`kubectl delete node`), which also removes a control plane's etcd member"
            )
            return
        self.drainer = Drain(
            kube=kube,
            say=self.say,
            clock=self.clock,
            drain_timeout=self.drain_timeout,
            accept_local_loss=self.accept_local_loss,
        )
        self.check(leaving, nodes)
        for name in leaving:
            self.step(name, functools.partial(self.leave, name, nodes.get(name)))
        for name in removal_order(leaving, self.health()):
            self.step(name, functools.partial(self.remove_member, name))

    def check(self, leaving: Sequence[str], nodes: Mapping[str, Any]) -> None:
        """Everything that would refuse the removal, before the first change."""
        missing = [n for n in leaving if is_control_plane(n) and n not in nodes]
        if missing and not self.without_drain:
            raise RemovalError(
                f"{', '.join(missing)}: no node object, so raya cannot remove its etcd member "
                f"through the API; nothing changed. Pass {WITHOUT_DRAIN} to delete it anyway "
                "and remove the member by hand (docs/control-plane.md, Shrinking)"
            )
        if missing:
            self.say(
                f"{', '.join(missing)}: no node object; deleting it with whatever etcd member "
                f"it has, as {WITHOUT_DRAIN} asks"
            )
        health = self.health()
        problem = quorum_problem(health, removal_order(leaving, health))
        if problem:
            raise RemovalError(f"shrinking refused, nothing changed: {problem}")
        for name in leaving:
            if name in nodes:
                self.step(name, functools.partial(self.drainer_of().check_local_data, name))
                self.step(name, functools.partial(self.check_volume_places, name, leaving))

    def check_volume_places(self, name: str, leaving: Sequence[str]) -> None:
        """Refuse to delete a node whose pods use Hetzner Volumes that no node staying could
        take (a volume attaches only in its location), unless accepted."""
        claims = stranded(self.kube, name, leaving)
        if not claims:
            return
        if not self.accept_volume_downtime:
            raise RemovalError(
                "pods on Hetzner Volumes would have no node to go to once the leaving nodes "
                f"are gone (none staying where their volume is, Ready and schedulable): "
                f"{', '.join(claims)}; they would stay Pending until a node there joins. Keep "
                "a node in that location, move their data first, or pass "
                "--accept-volume-downtime"
            )
        self.say(
            f"{name}: its pods wait for a node where their volume is, as accepted: "
            f"{', '.join(claims)}"
        )

    def health(self) -> dict[str, str]:
        """Every etcd member's node, read again: '' when healthy (a voter on a Ready node,
        `raya.operate.etcd`), else what it is."""
        return {
            member.node: "" if member.healthy else member.describe()
            for member in etcd.members(self.kube.nodes(), ())
        }

    def step(self, name: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as error:  # ours, or the API client's
            problem = str(error) if isinstance(error, RayaError) else reason(error)
            raise RemovalError(
                f"{name}: {problem}; no server was deleted (nodes drained so far stay "
                "cordoned: `kubectl uncordon` them, or fix this and run `raya up` again)"
            ) from None

    def leave(self, name: str, node: Any | None) -> None:
        if node is None:
            self.say(f"{name}: not registered in the cluster, nothing to drain")
            return
        self.kube.cordon(name, True)
        self.drainer_of().drain(name)
        self.say(f"{name}: cordoned and drained")

    def remove_member(self, name: str) -> None:
        """Disable k3s on `name`, ask k3s to remove its member, once etcd keeps its quorum
        without it, wait until k3s says it is gone, then stop k3s there."""
        health = self.health()
        problem = quorum_problem(health, [name])
        if problem:
            raise RemovalError(problem)
        code, output = self.remote(name, DISARM)
        if code != 0:
            last = (output.strip().splitlines() or [f"exit code {code}"])[-1]
            if not health.get(name):
                raise RemovalError(
                    f"could not disable k3s over SSH ({last}); its member is left as it is: "
                    "removed while k3s may start again, it would join etcd again"
                )
            self.say(
                f"{name}: not reachable over SSH ({last}); its member is not healthy "
                f"({health[name]}): removing it; if its k3s comes back before its server "
                "is deleted, raya refuses"
            )
        self.kube.core.patch_node(
            name, {"metadata": {"annotations": {REMOVE: "true"}}}, _request_timeout=30
        )
        deadline = self.clock.now() + self.member_timeout
        while True:
            node = self.kube.node(name)
            removed = (node.metadata.annotations or {}).get(REMOVED) if node else None
            if removed:
                break
            if self.clock.now() >= deadline:
                raise RemovalError(
                    f"k3s did not remove its etcd member within {self.member_timeout:.0f} s "
                    f"(annotation {REMOVE}=true set, no {REMOVED} yet): see the control "
                    f"planes' k3s logs. k3s there still runs but is disabled: to keep it, "
                    f"`systemctl enable {K3S_UNIT}` and delete {LEAVING_DROPIN}"
                )
            self.clock.sleep(POLL)
        self.removed[name], self.last_removal = str(removed), self.clock.now()
        code, output = self.remote(name, STOP)
        stopped = "k3s stopped" if code == 0 else f"k3s not stopped ({output.strip()})"
        self.say(f"{name}: etcd member {removed} removed; {stopped}")

    def confirm(self, leaving: Sequence[str]) -> None:
        """Right before Pulumi deletes the servers: until `watch` seconds after the last
        removal, refuse as soon as a removed member is back (a member of etcd again)."""
        if self.drainer is None or not self.removed:
            return
        deadline = self.last_removal + self.watch
        while True:
            for name, member in self.removed.items():
                self.step(name, functools.partial(self.still_removed, name, member))
            if self.clock.now() >= deadline:
                break
            self.clock.sleep(POLL)
        self.say(
            f"etcd: {', '.join(self.removed)} still removed {self.watch:.0f} s after the last "
            "removal; deleting their servers"
        )

    def still_removed(self, name: str, member: str) -> None:
        node = self.kube.node(name)
        notes = (node.metadata.annotations or {}) if node is not None else {}
        if node is None or (notes.get(REMOVED) == member and not notes.get(etcd.MEMBER_NAME)):
            return
        raise RemovalError(
            f"its etcd member is back ({etcd.member(name, node).describe()}) after raya "
            f"removed {member}: k3s on it started again and joined through its `server:`. "
            f"Disable it (`raya ssh {name} -- sudo systemctl disable --now {K3S_UNIT}`) and "
            "run `raya up` again"
        )

    def after(self, leaving: Sequence[str]) -> None:
        """The leaving nodes' objects, deleted now that their servers are gone."""
        if self.drainer is None:
            return
        from kubernetes.client import ApiException

        for name in leaving:
            try:
                self.kube.core.delete_node(name, _request_timeout=30)
            except ApiException as error:
                if error.status != 404:
                    raise RemovalError(
                        f"{name}: its server is deleted but its node object is not "
                        f"({error.status} {error.reason}): `kubectl delete node {name}`"
                    ) from None
            self.say(f"{name}: node object deleted")
