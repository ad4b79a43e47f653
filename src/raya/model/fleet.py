"""The fleet: `deploy/fleet/agents.json` and every node's identity derived from it.

The file holds the list form `{"agents": ["cx23", ...]}`, pools
`{"pools": [{"name", "type", "count", "addresses", ...}]}`, or both.

An agent of the list is fully specified by its position `i` in the list: name `agent-i`,
private address `<subnet> + 20 + i`, DNS label `a<i>`, and a node password derived from the
cluster's join secret and its name. Its Hetzner server is `<clusterName>-agent-<i>`.

Control plane `k` (0 to raya:controlPlanes - 1) is `control-plane` at raya:controlPlaneIp for
k = 0, which growing never renames, and `control-plane-<k>` at controlPlaneIp + k with DNS
label `cp<k>` after it.

Node `i` of pool `p` is `p-i` (name and DNS label) at address `i` of the pool's own block
(`addresses`, a CIDR the user declares inside nodesSubnet): nothing of it depends on the
pool's position in the file nor on any other pool, so growing a pool, adding one or
removing another leaves every other node as it was (docs/fleet.md).

An autoscaled pool says `min` and `max` instead of `count`: Kubernetes' cluster autoscaler
creates and deletes its servers (Hetzner provider, node group `<clusterName>-<pool>`), so it
has no planned node. Its `addresses` is a Hetzner subnet of its own inside networkRange and
outside nodesSubnet: the autoscaler attaches each server to the network with that range
(`subnetIPRange`) and Hetzner picks a free address in it, which can then never be one that
raya planned for a node or a load balancer in nodesSubnet.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeGuard

from raya.errors import ConfigError
from raya.model.config import LOCATIONS, StackConfig, architecture, server_type_problem
from raya.model.jsonfile import check_keys, read_json
from raya.model.kube import label_problem, repels, taint_identity, taint_problem
from raya.model.unavailable import MaxUnavailable

AGENT_HOST_OFFSET = 20
# The longest DNS name in text, without the final dot: 255 octets on the wire (RFC 1035,
# section 2.3.4) less the length octets of the first label and of the root.
DNS_NAME_MAX = 253
# Servers one Hetzner network holds (Hetzner's Networks FAQ, "Are there any limits?"; the
# stored copy of that page lacks the answer, which kube-hetzner's maintainers quote too:
# "up to 100 servers per network", kube-hetzner/terraform-hcloud-kube-hetzner#1217): the
# private mode puts every node on one, so it stops there; the public mode has none.
NETWORK_SERVER_LIMIT = 100
CONTROL_PLANE_NAME = "control-plane"
CONTROL_PLANE_LABEL = "cp"

Role = Literal["control-plane", "agent"]


@dataclass(frozen=True)
class Node:
    name: str
    role: Role
    index: int | None  # position in agents.json; None for a control plane
    private_ip: ipaddress.IPv4Address
    dns_label: str
    server_type: str
    pool: str | None = None  # None: the control plane or an agent of the list form
    location: str | None = None  # None: the cluster's raya:location
    labels: tuple[tuple[str, str], ...] = ()  # k3s node-label, sorted by key
    taints: tuple[str, ...] = ()  # k3s node-taint, as declared

    @property
    def architecture(self) -> str:
        """Hetzner's name of its architecture (`x86`, `arm`): which snapshot it boots."""
        return architecture(self.server_type)


@dataclass(frozen=True)
class Pool:
    name: str
    server_type: str
    count: int
    addresses: ipaddress.IPv4Network  # its block: node i takes its i-th address
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[str, ...] = ()
    location: str | None = None
    # An autoscaled pool's bounds (`count` is then 0: it has no planned node); None otherwise.
    min_size: int | None = None
    max_size: int | None = None
    # How many of its agents `raya roll` may have unavailable at once; None: the roll's
    # `--max-unavailable`.
    max_unavailable: MaxUnavailable | None = None

    @property
    def autoscaled(self) -> bool:
        return self.max_size is not None


@dataclass(frozen=True)
class Fleet:
    agents: tuple[str, ...]  # the list form's server types, in position order
    pools: tuple[Pool, ...] = ()


def server_name(cluster_name: str, node_name: str) -> str:
    """A node's Hetzner server name: unique per Hetzner project, so prefixed by the cluster
    (one stack each); hostnames and k3s node names stay the node's name."""
    return f"{cluster_name}-{node_name}"


@dataclass(frozen=True)
class Cluster:
    config: StackConfig
    control_planes: tuple[Node, ...]  # the first one started the cluster (cluster-init)
    agents: tuple[Node, ...]
    # The pools the cluster autoscaler sizes: their nodes are not known ahead of time.
    autoscaled: tuple[Pool, ...] = ()

    @property
    def control_plane(self) -> Node:
        """The first control plane: the one that starts the cluster."""
        return self.control_planes[0]

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (*self.control_planes, *self.agents)

    def dns_name(self, node: Node) -> str:
        return f"{node.dns_label}.{self.config.zone_dns_name}"


def fleet_file(root: Path) -> Path:
    return root / "deploy" / "fleet" / "agents.json"


POOL_KEYS = (
    "name", "type", "count", "min", "max", "addresses", "labels", "taints", "location",
    "maxUnavailable",
)  # fmt: skip
_POOL_REQUIRED = ("name", "type", "addresses")
# `<clusterName>-<pool>-<id>`: the autoscaler names a server after its node group and 16 hex
# digits at most (kubernetes/autoscaler, cluster-autoscaler/cloudprovider/hetzner,
# hetzner_node_group.go, `newNodeName`: `%s-%x` of a random int63), and the name is the node's
# hostname, one DNS label of at most 63 characters.
AUTOSCALED_ID_DIGITS = 16
HOSTNAME_MAX = 63
# A DNS label short enough that `<clusterName>-<pool>-<i>` stays a hostname (63 characters:
# 32 for the cluster, 20 for the pool, 9 for the node's number), and without '-': a server name
# is `<clusterName>-<node>` in a Hetzner project that other stacks may share, and with a '-' in
# a pool's name `a` + `b-c` and `a-b` + `c` would give both stacks the server `a-b-c-0`. With
# none, a pool node's name is one word and a number, so the name after the cluster's is
# always one of `agent-<i>`, `control-plane[-<k>]` and `<word>-<i>`, whatever either stack's
# cluster name holds (docs/fleet.md, "Names").
_POOL_NAME = re.compile(r"[a-z][a-z0-9]{0,19}")
# The words of raya's own names after the cluster's: pools named so would take the list form's
# node names (`agent-<i>`), its spread group's (`<clusterName>-agents`), or, in a stack whose
# cluster is named `<another's>-control`, the other's control planes' server names
# (`<c>-control-plane-<k>`) and spread group (`<c>-control-planes`).
_RESERVED_POOLS = ("agent", "agents", "control", "plane", "planes")


def load_fleet(path: Path) -> Fleet:
    """The list form's server types, in position order, and the pools, as declared."""
    data = read_json(path, "fleet", ConfigError)
    if not isinstance(data, dict) or not {"agents", "pools"} & set(data):
        raise ConfigError(
            f'{path}: expected {{"agents": ["cx23", ...]}} or {{"pools": [{{"name": ...}}]}}'
        )
    unknown = sorted(set(data) - {"agents", "pools"})
    if unknown:
        raise ConfigError(
            f"{path}: unknown top-level key(s) {', '.join(unknown)}; accepted: agents, pools"
        )
    agents = data.get("agents", [])
    if not isinstance(agents, list):
        raise ConfigError(f"{path}: 'agents' must be a list of Hetzner server types")
    for i, server_type in enumerate(agents):
        problem = server_type_problem(server_type)
        if problem:
            raise ConfigError(f"{path}: agents[{i}] {problem}")
    pools = data.get("pools", [])
    if not isinstance(pools, list):
        raise ConfigError(f"{path}: 'pools' must be a list of pools ({{\"name\": ...}})")
    parsed: dict[str, Pool] = {}
    for k, entry in enumerate(pools):
        pool = _parse_pool(path, k, entry)
        if pool.name in parsed:
            raise ConfigError(f"{path}: pools[{k}] ({pool.name}): field 'name' is used twice")
        parsed[pool.name] = pool
    return Fleet(agents=tuple(agents), pools=tuple(parsed.values()))


def _parse_pool(path: Path, k: int, entry: object) -> Pool:
    where = f"{path}: pools[{k}]"
    if not isinstance(entry, dict):
        raise ConfigError(
            f"{where}: expected an object with name, type, count, addresses (or min and max "
            "instead of count: an autoscaled pool)"
        )
    name = entry.get("name")
    if isinstance(name, str) and _POOL_NAME.fullmatch(name):
        where = f"{where} ({name})"

    def fail(field: str, problem: str) -> ConfigError:
        return ConfigError(f"{where}: field '{field}' {problem}")

    check_keys(entry, POOL_KEYS, _POOL_REQUIRED, fail, "a pool field")
    if not isinstance(name, str) or not _POOL_NAME.fullmatch(name):
        raise fail(
            "name",
            f"is {name!r}; accepted: 1-20 lowercase letters or digits, a letter first, no '-' "
            "(server names are `<clusterName>-<pool>-<i>`: a '-' would let another stack's "
            "cluster and pool names spell the same ones)",
        )
    if name in _RESERVED_POOLS:
        raise fail(
            "name",
            f"is {name!r}, reserved (a word of raya's own node and group names); accepted: "
            f"any name but {', '.join(_RESERVED_POOLS)}",
        )
    problem = server_type_problem(entry["type"])
    if problem:
        raise fail("type", problem)
    count, min_size, max_size = _pool_size(entry, fail)
    addresses = entry["addresses"]
    try:
        if not isinstance(addresses, str) or "/" not in addresses:
            raise ValueError
        block = ipaddress.IPv4Network(addresses)  # strict: no host bits
    except ValueError:
        raise fail(
            "addresses",
            f"is {addresses!r}; accepted: an IPv4 CIDR without host bits such as 10.0.1.64/27",
        ) from None
    labels = entry.get("labels", {})
    if not isinstance(labels, dict):
        raise fail("labels", f"is {labels!r}; accepted: an object of label keys to values")
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            raise fail("labels", problem)
    taints = entry.get("taints", [])
    if not isinstance(taints, list):
        raise fail("taints", f"is {taints!r}; accepted: a list of key[=value]:Effect")
    seen: set[tuple[str, str]] = set()
    for taint in taints:
        problem = taint_problem(taint)
        if problem:
            raise fail("taints", problem)
        if taint_identity(taint) in seen:
            raise fail("taints", f"has key and effect of {taint!r} twice")
        seen.add(taint_identity(taint))
    location = entry.get("location")
    if "location" in entry and (not isinstance(location, str) or location not in LOCATIONS):
        raise fail("location", f"is {location!r}; accepted: {', '.join(LOCATIONS)}")
    max_unavailable = _max_unavailable(entry, fail) if "maxUnavailable" in entry else None
    return Pool(
        name=name,
        server_type=entry["type"],
        count=count,
        addresses=block,
        labels=tuple(sorted(labels.items())),
        taints=tuple(taints),
        location=location,
        min_size=min_size,
        max_size=max_size,
        max_unavailable=max_unavailable,
    )


def _max_unavailable(
    entry: Mapping[str, object], fail: Callable[[str, str], ConfigError]
) -> MaxUnavailable:
    """`maxUnavailable`: a count as a number (`2`) or a percentage as a string (`"25%"`),
    under `--max-unavailable`'s rules; nothing else (not `"2"`, `true` nor `2.0`)."""
    value = entry["maxUnavailable"]
    accepted = (
        "accepted: a whole number of nodes from 1 (such as 2) or a percentage of the pool "
        'from 1% to 100% as a string (such as "25%")'
    )
    if isinstance(value, str) and value.endswith("%"):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        raise fail("maxUnavailable", f"is {value!r}; {accepted}")
    try:
        return MaxUnavailable.parse(text)
    except ValueError:
        raise fail("maxUnavailable", f"is {value!r}; {accepted}") from None


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _pool_size(
    entry: Mapping[str, object], fail: Callable[[str, str], ConfigError]
) -> tuple[int, int | None, int | None]:
    """`count`, or `min` and `max` (an autoscaled pool), never both: a pool's nodes are either
    planned by raya or made by the autoscaler."""
    bounds = [field for field in ("min", "max") if field in entry]
    if "count" in entry:
        if bounds:
            raise fail(
                bounds[0],
                "is set beside 'count'; accepted: 'count' (nodes raya plans) or 'min' and "
                "'max' (nodes the cluster autoscaler makes), not both",
            )
        count = entry["count"]
        if not _whole(count):
            raise fail("count", f"is {count!r}; accepted: a whole number, 0 or more")
        return count, None, None
    if not bounds:
        raise fail("count", "is missing; accepted: 'count', or 'min' and 'max' (autoscaled)")
    if len(bounds) == 1:
        other = "max" if bounds == ["min"] else "min"
        raise fail(other, f"is missing beside '{bounds[0]}'; accepted: both 'min' and 'max'")
    low, high = entry["min"], entry["max"]
    if not _whole(low):
        raise fail("min", f"is {low!r}; accepted: a whole number, 0 or more")
    if not _whole(high) or high == 0:
        raise fail("max", f"is {high!r}; accepted: a whole number, 1 or more")
    if low > high:
        raise fail("min", f"is {low}, above 'max' {high}; accepted: 0 to {high}")
    return 0, low, high


def build_cluster(config: StackConfig, fleet: Fleet | tuple[str, ...], source: str) -> Cluster:
    """Every node's name, address and DNS label; `source` names the fleet file in errors.
    A bare tuple is the list form's server types."""
    if not isinstance(fleet, Fleet):
        fleet = Fleet(agents=fleet)
    agents = fleet.agents
    subnet = config.nodes_subnet
    first = subnet.network_address + AGENT_HOST_OFFSET
    capacity = max(0, int(subnet.broadcast_address) - int(first))
    if len(agents) > capacity:
        raise ConfigError(
            f"{source}: {len(agents)} agents, but nodesSubnet {subnet} addresses at most "
            f"{capacity} from {first}"
        )
    nodes = tuple(
        Node(
            name=f"agent-{i}",
            role="agent",
            index=i,
            private_ip=first + i,
            dns_label=f"a{i}",
            server_type=server_type,
        )
        for i, server_type in enumerate(agents)
    )
    reserved = config.reserved_ips
    if any(node.private_ip in reserved for node in nodes):
        held = (
            f"raya:controlPlaneIp {config.control_plane_ip}"
            if len(reserved) == 1
            else f"{reserved[0]}-{reserved[-1]}, held by raya:controlPlanes "
            f"{config.control_planes} (the control planes and their private load balancer)"
        )
        raise ConfigError(
            f"{source}: agents take {first}-{first + len(agents) - 1}, which overlaps {held}"
        )
    control_planes = tuple(
        Node(
            name=CONTROL_PLANE_NAME if k == 0 else f"{CONTROL_PLANE_NAME}-{k}",
            role="control-plane",
            index=None,
            private_ip=address,
            dns_label=CONTROL_PLANE_LABEL if k == 0 else f"{CONTROL_PLANE_LABEL}{k}",
            server_type=config.control_plane_server_type,
        )
        for k, address in enumerate(config.control_plane_ips)
    )
    pooled = _pool_nodes(config, fleet.pools, {node.private_ip for node in nodes}, source)
    cluster = Cluster(
        config=config,
        control_planes=control_planes,
        agents=(*nodes, *pooled),
        autoscaled=tuple(pool for pool in fleet.pools if pool.autoscaled),
    )
    if config.public and cluster.autoscaled:
        raise ConfigError(
            f"{source}: pool {cluster.autoscaled[0].name} is autoscaled (min, max), but "
            "raya:network is public: an autoscaled node takes its address from the private "
            "network's DHCP; accepted: autoscaled pools in the private mode, pools with count "
            "in the public mode"
        )
    # An autoscaled pool's nodes are on the network too, up to its max.
    autoscaled = sum(pool.max_size or 0 for pool in cluster.autoscaled)
    if not config.public and len(cluster.nodes) + autoscaled > NETWORK_SERVER_LIMIT:
        raise ConfigError(
            f"{source}: {len(cluster.nodes) + autoscaled} nodes (control planes: "
            f"{len(control_planes)}, agents: {len(cluster.agents)}"
            f"{f', autoscaled at most: {autoscaled}' if autoscaled else ''}), but raya:network "
            "is private and a Hetzner network "
            f"holds at most {NETWORK_SERVER_LIMIT} servers (Hetzner's Networks FAQ); accepted: "
            f"at most {NETWORK_SERVER_LIMIT} nodes, or raya:network: public in a new stack "
            "(the nodes talk over their public addresses: docs/fleet.md, \"Beyond 100 nodes\")"
        )
    _check_unique(cluster, source)
    for node in cluster.nodes:
        name = cluster.dns_name(node).removesuffix(".")
        if len(name) > DNS_NAME_MAX:
            raise ConfigError(
                f"{source}: node {node.name}'s DNS name {name} is {len(name)} characters; "
                f"accepted: at most {DNS_NAME_MAX} (a DNS name's limit, RFC 1035): a shorter "
                "raya:parentZone or raya:managedSubdomain, or shorter pool names"
            )
    # The add-ons' install jobs carry no toleration at all, of the control plane's taint or any
    # other: helm-controller gives tolerations to `spec.bootstrap` charts only
    # (k3s-io/helm-controller, pkg/controllers/chart/chart.go, `job`), and of raya's add-ons
    # only the cloud controller is one (raya.nodes.addons). Nor do the add-ons' own pods
    # tolerate a pool's taints: they need a node that repels nothing.
    if not config.control_plane_schedulable:
        # An autoscaled pool counts when it always keeps a node (`min` 1 or more).
        open_nodes = [
            *(node.taints for node in cluster.agents),
            *(pool.taints for pool in cluster.autoscaled if pool.min_size),
        ]
        open_nodes = [taints for taints in open_nodes if not any(map(repels, taints))]
        if not cluster.agents and not open_nodes:
            raise ConfigError(
                f"{source}: no agents, and the control plane is tainted "
                "(raya:controlPlaneSchedulable is false), so the add-ons would never be "
                "scheduled; accepted: at least one agent, or raya:controlPlaneSchedulable: true"
            )
        if not open_nodes:
            pools = sorted(
                {node.pool for node in cluster.agents if node.pool}
                | {pool.name for pool in cluster.autoscaled}
            )
            raise ConfigError(
                f"{source}: every agent is tainted NoSchedule or NoExecute (pools "
                f"{', '.join(pools)}), and the control plane too (raya:controlPlaneSchedulable "
                "is false), so the add-ons' install jobs, which tolerate no taint, would stay "
                "Pending; accepted: at least one agent without such a taint (a pool with none, "
                "or PreferNoSchedule only), or raya:controlPlaneSchedulable: true"
            )
    return cluster


def _pool_nodes(
    config: StackConfig,
    pools: tuple[Pool, ...],
    taken: set[ipaddress.IPv4Address],
    source: str,
) -> list[Node]:
    """The pools' nodes, each pool in its own block of addresses."""
    subnet = config.nodes_subnet
    # The first addresses are the control planes' (raya:controlPlaneIp and its peers), and the
    # gateway's when nodesSubnet starts the network.
    reserved = {
        **{address: f"an address held by raya:controlPlanes {config.control_planes}"
           for address in config.reserved_ips},
        config.control_plane_ip: "raya:controlPlaneIp",
        subnet.broadcast_address: "nodesSubnet's broadcast address",
    }  # fmt: skip
    reserved_below = subnet.network_address + AGENT_HOST_OFFSET
    nodes: list[Node] = []
    for k, pool in enumerate(pools):

        def fail(field: str, problem: str, pool: Pool = pool, k: int = k) -> ConfigError:
            return ConfigError(f"{source}: pools[{k}] ({pool.name}): field '{field}' {problem}")

        location = pool.location or config.location
        if LOCATIONS[location] != config.network_zone:
            raise fail(
                "location",
                f"is {location!r}, in network zone {LOCATIONS[location]}, but the cluster's "
                f"network is in {config.network_zone}; accepted: "
                + ", ".join(name for name, z in LOCATIONS.items() if z == config.network_zone),
            )
        block = pool.addresses
        for other in pools[:k]:
            if block.overlaps(other.addresses):
                raise fail(
                    "addresses",
                    f"is {block}, which overlaps pool {other.name}'s {other.addresses}",
                )
        if pool.autoscaled:
            _check_autoscaled(config, pool, fail)
            continue
        if not block.subnet_of(subnet):
            raise fail("addresses", f"is {block}, outside nodesSubnet {subnet}")
        if block.network_address < reserved_below:
            raise fail(
                "addresses",
                f"is {block}, which takes from the first {AGENT_HOST_OFFSET} addresses of "
                f"nodesSubnet (the control planes'); accepted: a block from {reserved_below}",
            )
        for address, what in reserved.items():
            if address in block:
                raise fail("addresses", f"is {block}, which holds {what} {address}")
        clash = sorted(address for address in taken if address in block)
        if clash:
            raise fail(
                "addresses",
                f"is {block}, which holds {clash[0]}, an address of the agents list "
                f"(agent-{int(clash[0]) - int(reserved_below)})",
            )
        if pool.count > block.num_addresses:
            raise fail(
                "count",
                f"is {pool.count}, but its addresses {block} hold at most {block.num_addresses}",
            )
        nodes.extend(
            Node(
                name=f"{pool.name}-{i}",
                role="agent",
                index=i,
                private_ip=block.network_address + i,
                dns_label=f"{pool.name}-{i}",
                server_type=pool.server_type,
                pool=pool.name,
                location=pool.location,
                labels=pool.labels,
                taints=pool.taints,
            )
            for i in range(pool.count)
        )
    return nodes


def _check_autoscaled(
    config: StackConfig, pool: Pool, fail: Callable[[str, str], ConfigError]
) -> None:
    """An autoscaled pool's subnet and names: Hetzner picks its nodes' addresses in its block,
    so the block must be a subnet of the network that holds no address raya plans."""
    block, network = pool.addresses, config.network_range
    if not block.subnet_of(network):
        raise fail("addresses", f"is {block}, outside networkRange {network}; accepted: a "
                   "block inside it (the pool's own Hetzner subnet)")  # fmt: skip
    if block.overlaps(config.nodes_subnet):
        raise fail(
            "addresses",
            f"is {block}, which overlaps nodesSubnet {config.nodes_subnet}, where raya plans "
            "the control planes', the load balancers' and the planned nodes' addresses; "
            "accepted: a block of networkRange outside it (Hetzner assigns the autoscaled "
            "nodes' addresses itself, anywhere in the block)",
        )
    if block.overlaps(config.load_balancer_subnet):
        raise fail(
            "addresses",
            f"is {block}, which overlaps raya:loadBalancerSubnet {config.load_balancer_subnet}, "
            "where Hetzner addresses the cloud controller's load balancers; accepted: a block "
            "of networkRange outside both it and nodesSubnet",
        )
    if config.gateway in block:
        raise fail("addresses", f"is {block}, which holds the network's gateway "
                   f"{config.gateway}; accepted: a block from {config.gateway + 1} up")  # fmt: skip
    # Its network and broadcast addresses are no server's.
    hosts = block.num_addresses - 2
    assert pool.max_size is not None
    if pool.max_size > hosts:
        raise fail("max", f"is {pool.max_size}, but its addresses {block} hold at most {hosts} "
                   "servers (a subnet's first and last addresses are no server's)")  # fmt: skip
    group = server_name(config.cluster_name, pool.name)
    longest = len(group) + 1 + AUTOSCALED_ID_DIGITS
    if longest > HOSTNAME_MAX:
        raise fail(
            "name",
            f"is {pool.name!r}: the autoscaler names its servers `{group}-<up to "
            f"{AUTOSCALED_ID_DIGITS} hex digits>`, up to {longest} characters; accepted: "
            f"raya:clusterName and the pool's name together at most "
            f"{HOSTNAME_MAX - AUTOSCALED_ID_DIGITS - 2} characters (a hostname is one DNS "
            f"label of at most {HOSTNAME_MAX})",
        )


def _check_unique(cluster: Cluster, source: str) -> None:
    """No two nodes share a name, a DNS label or an address, whoever declared them."""
    for field in ("name", "dns_label", "private_ip"):
        seen: dict[object, str] = {}
        for node in cluster.nodes:
            value = getattr(node, field)
            if value in seen:
                raise ConfigError(
                    f"{source}: nodes {seen[value]} and {node.name} share the {field} {value}"
                )
            seen[value] = node.name


def sold_problem(
    cluster: Cluster,
    fleet: Fleet,
    sold: Mapping[str, tuple[str, ...]],
    *,
    fleet_source: str,
    stack_source: str,
) -> str | None:
    """What is wrong with the server types of `cluster` given where Hetzner sells each
    (`sold`: type -> locations; a type missing is one Hetzner does not offer), naming the
    file and field that chose the type and the location; None if every one is sold where
    its nodes are."""
    config = cluster.config
    choices = [
        (f"{stack_source}: raya:controlPlaneServerType", config.control_plane_server_type,
         config.location, "raya:location"),
        *((f"{fleet_source}: agents[{i}]", server_type, config.location, "raya:location")
          for i, server_type in enumerate(fleet.agents)),
        *((f"{fleet_source}: pools[{k}] ({pool.name}): field 'type'", pool.server_type,
           pool.location or config.location,
           "the pool's 'location'" if pool.location else "raya:location")
          for k, pool in enumerate(fleet.pools) if pool.count or pool.autoscaled),
    ]  # fmt: skip
    for where, server_type, location, chosen_by in choices:
        places = sold.get(server_type)
        if places is None:
            return f"{where} is {server_type!r}, a server type Hetzner does not offer"
        if location not in places:
            return (
                f"{where} is {server_type!r}, which Hetzner does not sell in {location} "
                f"({chosen_by}); it sells {server_type} in {', '.join(places) or 'no location'}"
                f"; accepted: a type sold in {location}, or one of those locations"
            )
    return None


def node_password(agent_secret: str, node_name: str) -> str:
    """The node password of node `node_name` (`control-plane`, `agent-<i>`): stable across
    re-creations of its VM, so k3s, which keeps its hash in the datastore, never refuses it.
    Keyed by the agent secret, the one join secret every node's config already holds."""
    message = f"raya node password {node_name}".encode()
    return hmac.new(agent_secret.encode(), message, hashlib.sha256).hexdigest()
