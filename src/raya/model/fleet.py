"""The fleet: `deploy/fleet/agents.json` and every node's identity derived from it.

An agent is fully specified by its position `i` in the list: name `agent-i`, private
address `<subnet> + 20 + i`, DNS label `a<i>`, and a node password derived from the
cluster's join secret and its name. Its Hetzner server is `<clusterName>-agent-<i>`.
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
    index: int | None  # position in agents.json; None for the control plane
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
    control_plane: Node
    agents: tuple[Node, ...]

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.control_plane, *self.agents)

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
    if any(node.private_ip == config.control_plane_ip for node in nodes):
        raise ConfigError(
            f"{source}: agents take {first}-{first + len(agents) - 1}, which overlaps "
            f"raya:controlPlaneIp {config.control_plane_ip}"
        )
    control_plane = Node(
        name=CONTROL_PLANE_NAME,
        role="control-plane",
        index=None,
        private_ip=config.control_plane_ip,
        dns_label=CONTROL_PLANE_LABEL,
        server_type=config.control_plane_server_type,
    )
    return Cluster(config=config, control_plane=control_plane, agents=nodes)


def node_password(agent_secret: str, node_name: str) -> str:
    """The node password of node `node_name` (`control-plane`, `agent-<i>`): stable across
    re-creations of its VM, so k3s, which keeps its hash in the datastore, never refuses it.
    Keyed by the agent secret, the one join secret every node's config already holds."""
    message = f"raya node password {node_name}".encode()
    return hmac.new(agent_secret.encode(), message, hashlib.sha256).hexdigest()
