"""The fleet: `deploy/fleet/agents.json` and every node's identity derived from it.

An agent is fully specified by its position `i` in the list: name `agent-i`, private
address `<subnet> + 20 + i`, DNS label `a<i>`, and a node password derived from the
cluster's join secret and its name. Its Hetzner server is `<clusterName>-agent-<i>`.

Control plane `k` (0 to raya:controlPlanes - 1) is `control-plane` at raya:controlPlaneIp for
k = 0, which growing never renames, and `control-plane-<k>` at controlPlaneIp + k with DNS
label `cp<k>` after it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from raya.errors import ConfigError
from raya.model.config import StackConfig, server_type_problem
from raya.model.jsonfile import read_json

AGENT_HOST_OFFSET = 20
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


def server_name(cluster_name: str, node: Node) -> str:
    """The node's Hetzner server name: unique per Hetzner project, so prefixed by the cluster
    (one stack each); hostnames and k3s node names stay `node.name`."""
    return f"{cluster_name}-{node.name}"


@dataclass(frozen=True)
class Cluster:
    config: StackConfig
    control_planes: tuple[Node, ...]  # the first one started the cluster (cluster-init)
    agents: tuple[Node, ...]

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


def load_fleet(path: Path) -> tuple[str, ...]:
    """The agents' server types, in position order."""
    data = read_json(path, "fleet", ConfigError)
    if not isinstance(data, dict) or "agents" not in data:
        raise ConfigError(f'{path}: expected {{"agents": ["cx23", ...]}}')
    unknown = sorted(set(data) - {"agents"})
    if unknown:
        raise ConfigError(
            f"{path}: unknown top-level key(s) {', '.join(unknown)}; accepted: agents"
        )
    agents = data["agents"]
    if not isinstance(agents, list):
        raise ConfigError(f"{path}: 'agents' must be a list of Hetzner server types")
    for i, server_type in enumerate(agents):
        problem = server_type_problem(server_type)
        if problem:
            raise ConfigError(f"{path}: agents[{i}] {problem}")
    return tuple(agents)


def build_cluster(config: StackConfig, agents: tuple[str, ...], source: str) -> Cluster:
    """Every node's name, address and DNS label; `source` names the fleet file in errors."""
    # The add-ons' install jobs carry no toleration of the control plane's taint (only
    # `spec.bootstrap` charts do: k3s-io/helm-controller, pkg/controllers/chart/chart.go, `job`),
    # nor do the add-ons' own pods: with no agent they would never be scheduled.
    if not agents and not config.control_plane_schedulable:
        raise ConfigError(
            f"{source}: no agents, and the control plane is tainted "
            "(raya:controlPlaneSchedulable is false), so the add-ons would never be "
            "scheduled; accepted: at least one agent, or raya:controlPlaneSchedulable: true"
        )
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
    return Cluster(config=config, control_planes=control_planes, agents=nodes)


def node_password(agent_secret: str, node_name: str) -> str:
    """The node password of node `node_name` (`control-plane`, `agent-<i>`): stable across
    re-creations of its VM, so k3s, which keeps its hash in the datastore, never refuses it.
    Keyed by the agent secret, the one join secret every node's config already holds."""
    message = f"raya node password {node_name}".encode()
    return hmac.new(agent_secret.encode(), message, hashlib.sha256).hexdigest()
