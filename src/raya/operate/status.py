"""`raya status`: one row per node, from the Hetzner API, the zone's own name servers and the
Kubernetes API, each judged against what the deployment says it should be.

Facts are gathered by small sources (one per remote API, each reporting what it could not
reach instead of raising); `assess` turns them into rows of checks. A part that cannot be
reached is unknown, and unknown is not healthy.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from raya.cloud.kubeconfig import api_client as kubeconfig_api_client
from raya.cloud.kubeconfig import reason
from raya.errors import RayaError
from raya.model.fleet import Cluster, Pool
from raya.model.pins import Pins, snapshot_labels
from raya.operate.etcd import Member, members

HEALTHY, UNHEALTHY, UNKNOWN, SKIPPED = "ok", "bad", "unknown", "skipped"
DNS_PORT = 53
DNS_TIMEOUT = 5.0
API_TIMEOUT = 10.0
# The API server's certificate is unhealthy this close to its expiry: k3s renews it only when
# it starts, so the control plane must restart (a roll) before it runs out.
CERTIFICATE_WARNING = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Check:
    state: str  # HEALTHY, UNHEALTHY, UNKNOWN (could not be asked) or SKIPPED (not asked)
    text: str

    @property
    def healthy(self) -> bool:
        return self.state in (HEALTHY, SKIPPED)


def ok(text: str) -> Check:
    return Check(HEALTHY, text)


def bad(text: str) -> Check:
    return Check(UNHEALTHY, text)


def unknown(text: str) -> Check:
    return Check(UNKNOWN, text)


@dataclass(frozen=True)
class Row:
    node: str
    checks: dict[str, Check]  # column -> check, in COLUMNS order


COLUMNS = ("server", "image", "drift", "dns", "kubernetes")


# How many names a line lists before it only counts the rest (--json has them all).
LISTED = 10


def listed(names: Sequence[str]) -> str:
    more = len(names) - LISTED
    return ", ".join(names[:LISTED]) + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class PoolRow:
    """An autoscaled pool: its bounds, the servers of its node group (None: unknown), of
    those the ones registered as Nodes, and the unschedulable pods its nodes' labels and
    taints admit (`admits`; None: unknown)."""

    pool: str
    minimum: int
    maximum: int
    servers: tuple[str, ...] | None
    registered: tuple[str, ...]
    check: Check
    pending: tuple[str, ...] | None = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "min": self.minimum,
            "max": self.maximum,
            "servers": None if self.servers is None else list(self.servers),
            "registered": list(self.registered),
            "pending": None if self.pending is None else list(self.pending),
            **vars(self.check),
        }


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]
    cluster: dict[str, Check] = field(default_factory=dict)  # API, delegation, add-ons...
    pools: tuple[PoolRow, ...] = ()  # the autoscaled pools
    # The pods the scheduler could not place, cluster-wide ("namespace/name"), or why they
    # are unknown; None: not asked (no autoscaled pool). A fact, not a check: pods wait so
    # while the autoscaler adds a node.
    unschedulable: tuple[str, ...] | str | None = None

    def unschedulable_text(self) -> str:
        pods = self.unschedulable
        if pods is None:
            return "not asked"
        if isinstance(pods, str):
            return f"unknown ({pods})"
        return f"{len(pods)}: {listed(pods)}" if pods else "none"

    @property
    def healthy(self) -> bool:
        checks = [
            *self.cluster.values(),
            *(c for row in self.rows for c in row.checks.values()),
            *(pool.check for pool in self.pools),
        ]
        return all(check.healthy for check in checks)

    def as_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "cluster": {name: vars(check) for name, check in self.cluster.items()},
            "nodes": {row.node: {n: vars(c) for n, c in row.checks.items()} for row in self.rows},
            "pools": {pool.pool: pool.as_json() for pool in self.pools},
            "unschedulable": {
                "pods": list(self.unschedulable)
                if isinstance(self.unschedulable, tuple)
                else None,
                "text": self.unschedulable_text(),
            },
        }


# --- Facts, as the sources report them -------------------------------------------------------


@dataclass(frozen=True)
class ServerFacts:
    status: str  # Hetzner's: running, off, starting, ...
    server_type: str
    image_labels: Mapping[str, str] | None  # None: the snapshot it booted is gone


@dataclass(frozen=True)
class NodeFacts:
    ready: bool
    kubelet_version: str
    os_image: str
    addresses: Mapping[str, str]  # InternalIP, ExternalIP -> address
    unschedulable: bool = False
    provider_id: str = ""  # spec.providerID: hcloud://<server id>, set by its kubelet


@dataclass(frozen=True)
class Requirement:
    """One expression of a node selector term: on a label, or on a field (`metadata.name`)."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()
    on_field: bool = False


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # Equal (also when unset) or Exists
    value: str
    effect: str  # "" tolerates every effect


@dataclass(frozen=True)
class PendingPod:
    """A pod the scheduler could not place, with what of it decides which nodes may take it:
    its node selector, its required node affinity's terms (None: none required) and its
    tolerations."""

    name: str  # namespace/name
    node_selector: Mapping[str, str] = field(default_factory=dict)
    terms: tuple[tuple[Requirement, ...], ...] | None = None
    tolerations: tuple[Toleration, ...] = ()


# --- Judging ---------------------------------------------------------------------------------


def server_check(facts: ServerFacts | str | None) -> Check:
    if isinstance(facts, str):
        return unknown(facts)
    if facts is None:
        return bad("no such server")
    text = f"{facts.status} {facts.server_type}"
    return ok(text) if facts.status == "running" else bad(text)


def image_check(facts: ServerFacts | str | None, pins: Pins, cluster_name: str) -> Check:
    if not isinstance(facts, ServerFacts):
        return unknown("server unknown")
    if facts.image_labels is None:
        return bad("snapshot deleted")
    wanted = snapshot_labels(pins, cluster_name)
    text = (
        f"fcos {facts.image_labels.get('fcos_version', '?')}, "
        f"k3s {facts.image_labels.get('k3s_version', '?')}"
    )
    differ = [
        key for key in ("fcos_version", "k3s_version") if facts.image_labels.get(key) != wanted[key]
    ]
    return bad(f"{text} (pins: {', '.join(wanted[k] for k in differ)})") if differ else ok(text)


def drift_check(drift: Mapping[str, Sequence[str]] | str | None, node: str) -> Check:
    if drift is None:
        return Check(SKIPPED, "not checked")
    if isinstance(drift, str):
        return unknown(drift)
    parts = drift.get(node, ())
    return bad(f"{', '.join(parts)} differ") if parts else ok("none")


def dns_check(answer: Sequence[str] | str, expected: Sequence[str | None]) -> Check:
    """`expected`: the addresses the record should hold (the first control plane's, `cp`,
    holds every control plane's); None for one the stack does not know."""
    if isinstance(answer, str):
        return unknown(answer)
    if None in expected:
        return unknown(f"-> {', '.join(answer) or 'nothing'} (address unknown)")
    text = f"-> {', '.join(answer) or 'nothing'}"
    want = sorted(str(address) for address in expected)
    return ok(text) if sorted(answer) == want else bad(f"{text}, expected {', '.join(want)}")


def delegation_check(answer: Sequence[str] | str, name_servers: Sequence[str]) -> Check:
    if isinstance(answer, str):
        return unknown(answer)
    got, want = sorted(_fqdn(n) for n in answer), sorted(_fqdn(n) for n in name_servers)
    if got == want:
        return ok(f"NS {', '.join(want)}")
    return bad(f"parent delegates to {', '.join(got) or 'nothing'}, zone has {', '.join(want)}")


def kubernetes_check(facts: NodeFacts | str | None, kubelet_version: str, server_id: str) -> Check:
    """`server_id`: the node's server, as the stack recorded it ("" if it did not). The Node's
    provider ID must name it: Hetzner's cloud controller finds the node's server by that ID
    alone (load balancer targets, the node's deletion), and the ID never changes once set."""
    if isinstance(facts, str):
        return unknown(facts)
    if facts is None:
        return bad("not registered")
    addresses = ", ".join(f"{kind} {address}" for kind, address in sorted(facts.addresses.items()))
    text = (
        f"{'Ready' if facts.ready else 'NotReady'}{' (cordoned)' if facts.unschedulable else ''} "
        f"{facts.kubelet_version}, {facts.os_image}; {addresses}"
    )
    if facts.kubelet_version != kubelet_version:
        return bad(f"{text} (pin {kubelet_version})")
    server = f"hcloud://{server_id}"
    if server_id and facts.provider_id != server:
        return bad(
            f"{text}; provider ID {facts.provider_id or 'none'}, not its server's {server}: "
            "delete the Node object and restart k3s on it, or `raya roll` it"
        )
    return ok(text) if facts.ready and not facts.unschedulable else bad(text)


def etcd_checks(members: Sequence[Member]) -> dict[str, Check]:
    """One check per etcd member: healthy when it votes and its node is Ready."""
    return {f"etcd {m.node}": (ok if m.healthy else bad)(m.describe()) for m in members}


def api_servers_check(serving: Sequence[str], control_planes: Mapping[str, str]) -> Check:
    """The API servers that serve the cluster (the `kubernetes` Service's endpoints: each
    API server's advertise address, raya's private address) against the control planes
    (name -> private address): each must serve."""
    names = {address: name for name, address in control_planes.items()}
    listed = ", ".join(
        f"{names[a]} ({a})" if a in names else a for a in sorted(serving, key=_address_order)
    )
    missing = [f"{n} ({a})" for n, a in control_planes.items() if a not in serving]
    if missing:
        return bad(f"{', '.join(missing)} not serving; serving: {listed or 'none'}")
    return ok(listed)


def _address_order(address: str) -> tuple[int, ...]:
    return tuple(int(part) for part in address.split(".")) if address[:1].isdigit() else (999,)


def _fqdn(name: str) -> str:
    return name.rstrip(".").lower() + "."


def assess(
    outputs: Mapping[str, Any],
    pins: Pins,
    cluster_name: str,
    *,
    servers: Mapping[str, ServerFacts | str | None],
    records: Mapping[str, Sequence[str] | str],
    delegation: Sequence[str] | str,
    nodes: Mapping[str, NodeFacts] | str,
    drift: Mapping[str, Sequence[str]] | str | None,
    extra: Mapping[str, Check] | None = None,
    pools: Sequence[PoolRow] = (),
    unschedulable: Sequence[PendingPod] | str | None = None,
) -> Report:
    """The report from the facts; `outputs` are the stack's (what should be); `pools`, the
    autoscaled pools' rows (`pool_row`); `unschedulable`, the pods the scheduler could not
    place (None: not asked)."""
    rows = []
    servers_out = outputs.get("servers", {})
    control_planes = [entry.get("ipv4") for n, entry in servers_out.items() if _order(n)[0] == 0]
    for name, entry in sorted(servers_out.items(), key=_node_order):
        server = servers.get(name)
        node = nodes if isinstance(nodes, str) else nodes.get(name)
        rows.append(
            Row(
                name,
                {
                    "server": server_check(server),
                    "image": image_check(server, pins, cluster_name),
                    "drift": drift_check(drift, name),
                    "dns": dns_check(
                        records.get(name, "not asked"),
                        control_planes if name == "control-plane" else [entry.get("ipv4")],
                    ),
                    "kubernetes": kubernetes_check(
                        node, pins.k3s.version, str(entry.get("serverId") or "")
                    ),
                },
            )
        )
    cluster = {"delegation": delegation_check(delegation, outputs.get("nameServers", []))}
    cluster.update(extra or {})
    pending = (
        unschedulable
        if unschedulable is None or isinstance(unschedulable, str)
        else tuple(pod.name for pod in unschedulable)
    )
    return Report(tuple(rows), cluster, tuple(pools), pending)


def pool_row(
    pool: str,
    minimum: int,
    maximum: int,
    servers: Sequence[str] | str,
    nodes: Mapping[str, NodeFacts] | str,
    pending: Sequence[str] | None = (),
) -> PoolRow:
    """Autoscaled pool `pool` from the servers of its node group (their names, or why they
    are unknown), the Nodes (an autoscaled node registers by its server's name) and the
    unschedulable pods its nodes' labels and taints admit (`admits`; None: unknown):
    healthy when the servers' number is within `minimum` and `maximum` and each is
    registered and Ready. A server still booting is counted, not yet registered: unhealthy
    until it is. Pods pending while the pool is at its `maximum` are unhealthy too: the
    autoscaler cannot grow it for them."""
    pods = None if pending is None else tuple(pending)
    if isinstance(servers, str):
        return PoolRow(pool, minimum, maximum, None, (), unknown(servers), pods)
    names = tuple(sorted(servers))
    if isinstance(nodes, str):
        return PoolRow(pool, minimum, maximum, names, (), unknown(nodes), pods)
    registered = tuple(name for name in names if name in nodes)
    ready = [name for name in registered if nodes[name].ready]
    text = f"{len(names)} server(s) (min {minimum}, max {maximum}), {len(registered)} registered"
    text += f", {len(ready)} Ready"
    if pods:
        text += f", {len(pods)} pending pod(s) it could take"
    problems = []
    if not minimum <= len(names) <= maximum:
        problems.append(f"outside {minimum}..{maximum}")
    missing = [name for name in names if name not in ready]
    if missing:
        problems.append(f"not Ready: {', '.join(missing)}")
    if pods and len(names) >= maximum:
        problems.append(f"at its max with pods pending ({listed(pods)}): raise its max")
    return PoolRow(
        pool, minimum, maximum, names, registered,
        bad(f"{text}; {'; '.join(problems)}") if problems else ok(text), pods,
    )  # fmt: skip


def admits(labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], pod: PendingPod) -> bool:
    """Whether a node of these labels and taints passes the scheduler's two filters that
    read them for `pod` (kubernetes `pkg/scheduler/framework/plugins`): NodeAffinity (every
    `nodeSelector` entry, and one term of the required node affinity: terms or-ed, a term's
    expressions and-ed, an empty term matching nothing) and TaintToleration (each
    `NoSchedule` and `NoExecute` taint tolerated, `ToleratesTaint`). Nothing else is
    judged (resources, pod affinity, topology spread, volumes): a pod admitted may still
    not fit, one refused never does."""
    if any(labels.get(key) != value for key, value in pod.node_selector.items()):
        return False
    if pod.terms is not None and not any(
        term and all(_holds(requirement, labels) for requirement in term) for term in pod.terms
    ):
        return False
    return all(
        any(_tolerates(toleration, taint) for toleration in pod.tolerations)
        for taint in taints
        if taint["effect"] in ("NoSchedule", "NoExecute")
    )


def _holds(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    """k8s.io/component-helpers `scheduling/corev1/nodeaffinity`: a field names the node
    (`metadata.name`), which the autoscaler draws at random for a new node: never known."""
    value = None if requirement.on_field else labels.get(requirement.key)
    values, operator = requirement.values, requirement.operator
    if operator in ("Gt", "Lt"):
        try:
            have, bound = int(value or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > bound if operator == "Gt" else have < bound
    return {
        "In": value is not None and value in values,
        "NotIn": value is None or value not in values,
        "Exists": value is not None,
        "DoesNotExist": value is None,
    }.get(operator, False)


def _tolerates(toleration: Toleration, taint: Mapping[str, str]) -> bool:
    """k8s.io/api `core/v1/toleration.go`, `ToleratesTaint`."""
    if toleration.effect and toleration.effect != taint["effect"]:
        return False
    if toleration.key and toleration.key != taint["key"]:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("", "Equal") and toleration.value == taint.get("value", "")


def pool_node(cluster: Cluster, pool: Pool) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The labels and taints the cluster autoscaler gives a new node of `pool` when it
    decides whether growing the pool helps a pending pod (kubernetes/autoscaler,
    `cloudprovider/hetzner/hetzner_node_group.go`, `TemplateNodeInfo`,
    `buildNodeGroupLabels`): the server type, the region, the architecture, Hetzner's CSI
    location, the node group, the pool's own labels and taints; and `kubernetes.io/os`,
    which every kubelet sets (kubernetes `pkg/kubelet/kubelet_node_status.go`,
    `initialNode`)."""
    from raya.model.config import architecture
    from raya.nodes.autoscaler import IMAGE_ARCHITECTURES, NODE_GROUP_LABEL, _taint, node_group

    location = pool.location or cluster.config.location
    labels = {
        "node.kubernetes.io/instance-type": pool.server_type,
        "topology.kubernetes.io/region": location,
        "kubernetes.io/arch": IMAGE_ARCHITECTURES[architecture(pool.server_type)],
        "kubernetes.io/os": "linux",
        "csi.hetzner.cloud/location": location,
        NODE_GROUP_LABEL: node_group(cluster, pool),
        **dict(pool.labels),
    }
    return labels, [_taint(taint) for taint in pool.taints]


def control_plane_addresses(outputs: Mapping[str, Any]) -> dict[str, str]:
    """The stack's control planes, in order: name -> the address k3s uses (`nodeIp`: the
    private one, or the public one in the public mode; `privateIp` in stacks from before)."""
    servers = outputs.get("servers", {})
    return {
        name: str(entry.get("nodeIp", entry.get("privateIp", "")))
        for name, entry in sorted(servers.items(), key=_node_order)
        if _order(name)[0] == 0
    }


def _node_order(item: tuple[str, Any]) -> tuple[int, int, str]:
    """The control planes first, then the agents in fleet order."""
    return _order(item[0])


def _order(name: str) -> tuple[int, int, str]:
    if name.startswith("agent-") and name[6:].isdigit():
        return (1, int(name[6:]), name)
    k = name.removeprefix("control-plane-")
    return (0, int(k) if k.isdigit() else 0, name)


# --- Sources ---------------------------------------------------------------------------------


def hetzner_servers(
    token: str, endpoint: str, ids: Mapping[str, str], cluster_name: str
) -> tuple[dict[str, ServerFacts | str | None], dict[str, list[str]] | str]:
    """Each node's server, by the id the stack recorded, and the cluster autoscaler's
    servers (node group -> their names); a reason string where unreachable.

    One list of the cluster's servers (their label; 50 a page, as hcloud-python's `get_all`
    asks), not one request per node: 203 servers are 5 requests of Hetzner's hourly 3,600.
    The autoscaler's servers carry that label too (the pool's server labels,
    raya.nodes.autoscaler.cluster_config), with their node group's: the same list holds
    them. A server the list lacks (its label changed by hand) is asked for by its id."""
    import requests
    from hcloud import APIException, HCloudException

    from raya.cloud.image import hcloud_client
    from raya.cloud.program.cluster import CLUSTER_LABEL
    from raya.nodes.autoscaler import NODE_GROUP_LABEL

    if not token:
        return dict.fromkeys(ids, "HCLOUD_TOKEN not set"), "HCLOUD_TOKEN not set"
    client = hcloud_client(token, endpoint, API_TIMEOUT)
    try:
        listed = client.servers.get_all(label_selector=f"{CLUSTER_LABEL}={cluster_name}")
    except APIException as error:
        return dict.fromkeys(ids, f"Hetzner API: {error}"), f"Hetzner API: {error}"
    except (HCloudException, requests.RequestException) as error:
        why = f"Hetzner API unreachable: {error}"
        return dict.fromkeys(ids, why), why
    groups: dict[str, list[str]] = {}
    for server in listed:
        group = (server.labels or {}).get(NODE_GROUP_LABEL)
        if group is not None:
            groups.setdefault(str(group), []).append(str(server.name))
    by_id = {str(server.id): server for server in listed}
    found: dict[str, ServerFacts | str | None] = {}
    for node, server_id in ids.items():
        try:
            server = by_id.get(server_id) or client.servers.get_by_id(int(server_id))
        except APIException as error:
            found[node] = None if error.code == "not_found" else f"Hetzner API: {error}"
            continue
        except (HCloudException, requests.RequestException, ValueError) as error:
            found[node] = f"Hetzner API unreachable: {error}"
            continue
        image = server.image
        labels = None if image is None or image.id is None else dict(image.labels or {})
        found[node] = ServerFacts(
            status=str(server.status),
            server_type=str(server.server_type.name if server.server_type else "?"),
            image_labels=labels,
        )
    return found, groups


@dataclass(frozen=True)
class Dns:
    """Asks authoritative servers directly (never a cache): the zone's own for its records,
    the parent's for the delegation. `address_of` and `port` exist for tests."""

    address_of: Callable[[str], list[str]]
    port: int

    def a_records(self, name_servers: Sequence[str], name: str) -> list[str] | str:
        return self._ask(name_servers, name, "A", answer_only=True)

    def delegation(self, parent_servers: Sequence[str], zone: str) -> list[str] | str:
        return self._ask(parent_servers, zone, "NS", answer_only=False)

    def _ask(
        self, servers: Sequence[str], name: str, rdtype: str, answer_only: bool
    ) -> list[str] | str:
        import dns.exception
        import dns.flags
        import dns.message
        import dns.query
        import dns.rdatatype

        problems = []
        for server in servers:
            try:
                addresses = self.address_of(server)
            except OSError as error:
                problems.append(f"{server}: {error}")
                continue
            for address in addresses:
                query = dns.message.make_query(name, rdtype)
                query.flags &= ~dns.flags.RD  # an authoritative answer, not a recursive one
                try:
                    reply = dns.query.udp(query, address, timeout=DNS_TIMEOUT, port=self.port)
                except (dns.exception.DNSException, OSError) as error:
                    problems.append(f"{server} ({address}): {error or type(error).__name__}")
                    continue
                wanted = dns.rdatatype.from_text(rdtype)
                sections = reply.answer if answer_only else [*reply.answer, *reply.authority]
                return sorted(
                    item.to_text() for rrset in sections if rrset.rdtype == wanted for item in rrset
                )
        return "; ".join(problems) or "no name server"


def system_address_of(name: str) -> list[str]:
    import socket

    infos = socket.getaddrinfo(name.rstrip("."), 53, type=socket.SOCK_DGRAM)
    return sorted({str(info[4][0]) for info in infos})


def parent_name_servers(parent_zone: str) -> list[str] | str:
    """The parent zone's name servers, from the system's resolver."""
    import dns.exception
    import dns.resolver

    try:
        answer = dns.resolver.resolve(parent_zone, "NS", lifetime=DNS_TIMEOUT)
    except dns.exception.DNSException as error:
        return f"parent zone {parent_zone}: {error}"
    return sorted(item.to_text() for item in answer)


def kubernetes_nodes(kubeconfig: str, server: str | None = None) -> dict[str, NodeFacts] | str:
    """The nodes as the API reports them, trusting only the kubeconfig's CA; `server`
    overrides its address (tests). A reason string if the API cannot be asked."""
    from kubernetes import client as k8s

    listed: Any = ask_api(
        kubeconfig, server, lambda api: k8s.CoreV1Api(api).list_node(_request_timeout=API_TIMEOUT)
    )
    if isinstance(listed, str):
        return listed
    return {item.metadata.name: _node_facts(item) for item in listed.items}


Answer = TypeVar("Answer")


def ask_api(kubeconfig: str, server: str | None, ask: Callable[[Any], Answer]) -> Answer | str:
    """`ask(api)` through a client trusting only the kubeconfig's CA (`server` overrides its
    address: tests); a reason string if the API cannot be asked."""
    try:
        api = kubeconfig_api_client(kubeconfig, server)
    except RayaError as error:
        return str(error)
    try:
        return ask(api)
    except Exception as error:  # urllib3 and the client raise many kinds; all mean the same
        return f"API {api.configuration.host} unreachable: {reason(error)}"
    finally:
        api.close()


# The pods without a node that have not finished: the cluster autoscaler's own list of them
# (kubernetes/autoscaler `cluster-autoscaler/utils/kubernetes/listers.go`,
# `NewUnschedulablePodInNamespaceLister`), fields the API server selects pods on
# (kubernetes `pkg/apis/core/v1/conversion.go`); conditions are not among them.
UNBOUND_PODS = "spec.nodeName==,status.phase!=Succeeded,status.phase!=Failed"
# The reason the scheduler gives a pod it could not place (k8s.io/api `core/v1/types.go`,
# `PodReasonUnschedulable`; kubernetes `pkg/scheduler/schedule_one.go`,
# `handleSchedulingFailure`), by which the autoscaler picks the pods to grow a pool for.
UNSCHEDULABLE = "Unschedulable"


def kubernetes_unschedulable(kubeconfig: str, server: str | None = None) -> list[PendingPod] | str:
    """The pods the scheduler could not place, cluster-wide, as the cluster autoscaler finds
    them (`UnschedulablePodLister.List`): one list of the pods without a node, kept where
    the condition `PodScheduled` is `False` with reason `Unschedulable`. A reason string if
    the API cannot be asked; `server` overrides its address (tests)."""
    from kubernetes import client as k8s

    listed = ask_api(
        kubeconfig,
        server,
        lambda api: k8s.CoreV1Api(api).list_pod_for_all_namespaces(
            field_selector=UNBOUND_PODS, _request_timeout=API_TIMEOUT
        ),
    )
    if isinstance(listed, str):
        return listed
    return sorted(
        (_pending_pod(item) for item in listed.items if _unschedulable(item)),
        key=lambda pod: pod.name,
    )


def _unschedulable(item: Any) -> bool:
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == UNSCHEDULABLE
        for c in (item.status.conditions or [])
    )


def _pending_pod(item: Any) -> PendingPod:
    spec = item.spec
    affinity = spec.affinity.node_affinity if spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    terms = None
    if required is not None:
        terms = tuple(
            tuple(
                Requirement(e.key, e.operator, tuple(e.values or ()), on_field=on_field)
                for expressions, on_field in ((term.match_expressions, False),
                                              (term.match_fields, True))
                for e in expressions or []
            )
            for term in required.node_selector_terms or []
        )  # fmt: skip
    return PendingPod(
        name=f"{item.metadata.namespace}/{item.metadata.name}",
        node_selector=dict(spec.node_selector or {}),
        terms=terms,
        tolerations=tuple(
            Toleration(t.key or "", t.operator or "", t.value or "", t.effect or "")
            for t in spec.tolerations or []
        ),
    )


def kubernetes_addons(kubeconfig: str, server: str | None = None) -> dict[str, Check]:
    """The add-ons k3s installs on the control plane (`raya.nodes.addons`): each HelmChart's install
    job and each ClusterIssuer's Ready condition, one check each."""
    import json

    from raya.nodes.addons import addon_status

    def ask(api: Any) -> Any:
        def get(path: str) -> Any:
            response = api.call_api(
                "GET",
                api.configuration.host + path,
                header_params={"Accept": "application/json"},
                _request_timeout=API_TIMEOUT,
            )
            response.read()
            if response.status == 404:
                return None
            if not 200 <= response.status < 300:
                raise RuntimeError(f"GET {path}: HTTP {response.status}")
            return json.loads(response.data)

        return addon_status(get)

    states = ask_api(kubeconfig, server, ask)
    if isinstance(states, str):
        return {"add-ons": unknown(states)}
    return {
        f"{state.kind} {state.name}": (ok if state.ready else bad)(state.detail)
        for state in states
    }


def kubernetes_control_planes(
    kubeconfig: str, control_planes: Mapping[str, str], server: str | None = None
) -> dict[str, Check]:
    """The etcd members (from the nodes, `raya.operate.etcd`) and the API servers that serve
    (the `kubernetes` EndpointSlice in `default`), for the control planes (name -> private
    address, in order); `server` overrides the API's address (tests)."""
    from kubernetes import client as k8s

    def ask(api: Any) -> tuple[Any, Any]:
        return (
            k8s.CoreV1Api(api).list_node(_request_timeout=API_TIMEOUT).items,
            k8s.DiscoveryV1Api(api).read_namespaced_endpoint_slice(
                "kubernetes", "default", _request_timeout=API_TIMEOUT
            ),
        )

    answer = ask_api(kubeconfig, server, ask)
    if isinstance(answer, str):
        return {"etcd": unknown(answer)}
    nodes, found = answer
    serving = [a for endpoint in found.endpoints or [] for a in endpoint.addresses or []]
    return {
        **etcd_checks(members(nodes, list(control_planes))),
        "API servers": api_servers_check(serving, control_planes),
    }


def api_certificate(
    kubeconfig: str, server: str | None = None, now: datetime.datetime | None = None
) -> Check:
    """The API server certificate's expiry, read from a TLS handshake with the API that trusts
    only the kubeconfig's CA; unhealthy in its last 30 days. `server` overrides the address."""
    import base64
    import socket
    import ssl
    from urllib.parse import urlsplit

    import yaml
    from cryptography import x509

    try:
        cluster = yaml.safe_load(kubeconfig)["clusters"][0]["cluster"]
        address = urlsplit(server or cluster["server"])
        ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        host, port = str(address.hostname), address.port or 443
    except (yaml.YAMLError, KeyError, IndexError, TypeError, ValueError) as error:
        return unknown(f"the stack's kubeconfig is unusable: {error}")
    try:
        context = ssl.create_default_context(cadata=ca_pem)
        with (
            socket.create_connection((host, port), timeout=API_TIMEOUT) as connection,
            context.wrap_socket(connection, server_hostname=host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError) as error:
        return unknown(f"API {address.netloc} unreachable: {reason(error)}")
    if der is None:
        return unknown(f"API {address.netloc} sent no certificate")
    expires = x509.load_der_x509_certificate(der).not_valid_after_utc
    left = expires - (now or datetime.datetime.now(datetime.UTC))
    text = (
        f"expires {expires:%Y-%m-%d} (in {left.days} days)"
        if left.total_seconds() > 0
        else f"expired {expires:%Y-%m-%d}"
    )
    if left >= CERTIFICATE_WARNING:
        return ok(text)
    return bad(
        f"{text}: k3s renews it when it starts; `raya roll control-plane` restarts it"
    )


def _node_facts(item: Any) -> NodeFacts:
    conditions = {c.type: c.status for c in (item.status.conditions or [])}
    return NodeFacts(
        ready=conditions.get("Ready") == "True",
        kubelet_version=item.status.node_info.kubelet_version,
        os_image=item.status.node_info.os_image,
        addresses={a.type: a.address for a in (item.status.addresses or [])},
        unschedulable=bool(item.spec.unschedulable),
        provider_id=str(item.spec.provider_id or ""),
    )
