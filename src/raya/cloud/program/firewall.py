"""The Hetzner Firewalls in front of every server's public addresses.

Inbound, on the public interfaces: SSH and the Kubernetes API from the configured sources,
HTTP and HTTPS (the ingress) and ICMP from anywhere; everything else is dropped: kubelet
(10250), the overlay, NodePorts. Outbound stays open (no outbound rule).

In the private mode (`raya:network: private`) the nodes talk over the Hetzner network, which
firewalls never filter: one firewall holds those rules. In the public mode the nodes talk over
their public addresses, so the firewalls also admit, each only from the addresses that need
it: WireGuard (flannel's `wireguard-native`, the pods' traffic) and the API from every node,
the kubelet from the control planes, etcd's peer and client ports from the control planes
(when there are several), and the NodePorts from the ingress load balancer (it reaches
Traefik's Service by its targets' public addresses). Every node's address is known before any
server exists (its primary IP, `raya.cloud.program.network.define_public_addresses`), and the
balancer's too (`define_ingress_balancer`), so the rules are computed
with the nodes, in the same `raya up` that adds or removes one, and split over as many
firewalls as Hetzner's limits need; every firewall applies to every server of the cluster,
by label.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pulumi
import pulumi_hcloud as hcloud

from raya.cloud.program.cluster import CLUSTER_LABEL
from raya.errors import DeployError
from raya.model.config import IPNetwork
from raya.model.fleet import Cluster

ANYWHERE = ("0.0.0.0/0", "::/0")
SSH_PORT = "22"
API_PORT = "6443"
WEB_PORTS = ("80", "443")
# flannel's wireguard-native backend listens on 51820/udp for IPv4 (flannel-io/flannel,
# pkg/backend/wireguard/wireguard.go: `ListenPort` defaults to 51820; k3s' inbound rules,
# docs.k3s.io/installation/requirements: "Flannel Wireguard with IPv4").
WIREGUARD_PORT = "51820"
KUBELET_PORT = "10250"
ETCD_PORTS = "2379-2380"  # client and peer (k3s' inbound rules: "HA with embedded etcd")
# k3s' default service-node-port-range, kube-apiserver's (`--service-node-port-range`):
# where a LoadBalancer Service's balancer sends its traffic on each target.
NODE_PORTS = "30000-32767"
# Hetzner's limits: up to 5 firewalls applied to one server and up to 500 (effective) rules
# in one (Hetzner's Firewalls FAQ, "What are the limitations of Firewalls?"); rules "limited
# to 50 entries per Firewall and 500 effective rules" (its API, POST
# /firewalls/{id}/actions/set_rules). The page defining an effective rule was not at hand:
# each source address of each rule counts as one here, the most a rule with one port (or
# one range) can weigh, so a layout that fits by this count fits by Hetzner's.
FIREWALLS_PER_SERVER = 5
RULES_PER_FIREWALL = 50
EFFECTIVE_RULES_PER_FIREWALL = 500
# Source addresses in one rule entry: 100 (the API's limit, as hetzner-k3s validates rules
# against it: vitobotta/hetzner-k3s#647).
SOURCES_PER_RULE = 100


@dataclass(frozen=True)
class Peer:
    """A node of the cluster as a source: its public IPv4 address, /32."""

    name: str


@dataclass(frozen=True)
class IngressBalancer:
    """The ingress load balancer as a source: its public IPv4 address, /32."""


INGRESS_BALANCER = IngressBalancer()
Source = str | Peer | IngressBalancer


@dataclass(frozen=True)
class Rule:
    """An inbound rule entry: a protocol, a port (or range; none for ICMP) and its sources."""

    protocol: str
    port: str | None
    sources: tuple[Source, ...]
    description: str


def openings(cluster: Cluster) -> list[Rule]:
    """What the firewalls admit, whole (before `firewall_layout` splits it); a source list
    left empty closes its port."""
    config = cluster.config

    def cidrs(sources: tuple[IPNetwork, ...]) -> tuple[str, ...]:
        return tuple(str(source) for source in sources)

    nodes = tuple(Peer(node.name) for node in cluster.nodes) if config.public else ()
    control_planes = tuple(Peer(node.name) for node in cluster.control_planes)
    # Every public IPv4 address is in 0.0.0.0/0: listing the nodes beside it would only
    # spend effective rules.
    api_nodes = () if ipaddress.IPv4Network("0.0.0.0/0") in config.api_sources else nodes
    rules = [
        Rule("tcp", SSH_PORT, cidrs(config.ssh_sources), "SSH from raya:sshSources"),
        Rule(
            "tcp",
            API_PORT,
            (*cidrs(config.api_sources), *api_nodes),
            "Kubernetes API, raya:apiSources" + (" and the nodes" if api_nodes else ""),
        ),
        *(Rule("tcp", port, ANYWHERE, "ingress") for port in WEB_PORTS),
        Rule("icmp", None, ANYWHERE, "ICMP"),
    ]
    if config.public:
        rules += [
            Rule("udp", WIREGUARD_PORT, nodes, "WireGuard (pod traffic) from the nodes"),
            Rule("tcp", KUBELET_PORT, control_planes, "kubelet from the control planes"),
            Rule("tcp", NODE_PORTS, (INGRESS_BALANCER,), "NodePorts from the ingress balancer"),
        ]
        if len(control_planes) > 1:
            rules.append(Rule("tcp", ETCD_PORTS, control_planes, "etcd from the control planes"))
    return [rule for rule in rules if rule.sources]


def effective_rules(rules: Sequence[Rule]) -> int:
    """What `rules` weigh against Hetzner's 500 effective rules (one per source address)."""
    return sum(len(rule.sources) for rule in rules)


def firewall_layout(cluster: Cluster) -> tuple[tuple[Rule, ...], ...]:
    """The rules of each firewall, in order: `openings` cut into entries of at most
    SOURCES_PER_RULE sources, filled into firewalls of at most RULES_PER_FIREWALL entries
    and EFFECTIVE_RULES_PER_FIREWALL effective rules. Refused (before anything is declared)
    when a server would need more than FIREWALLS_PER_SERVER of them."""
    firewalls: list[list[Rule]] = [[]]
    weight = 0
    rules = openings(cluster)
    for rule in rules:
        sources = rule.sources
        while sources:
            if weight == EFFECTIVE_RULES_PER_FIREWALL or len(firewalls[-1]) == RULES_PER_FIREWALL:
                firewalls.append([])
                weight = 0
            taken = sources[: min(SOURCES_PER_RULE, EFFECTIVE_RULES_PER_FIREWALL - weight)]
            firewalls[-1].append(replace(rule, sources=taken))
            weight += len(taken)
            sources = sources[len(taken) :]
    if len(firewalls) > FIREWALLS_PER_SERVER:
        config = cluster.config
        total = effective_rules(rules)
        raise DeployError(
            f"deploy/fleet/agents.json: {len(cluster.nodes)} nodes need {total} effective "
            f"firewall rules (one per source address of each rule: WireGuard and the API from "
            f"every node (the API unless raya:apiSources holds 0.0.0.0/0), the kubelet and "
            f"etcd from the control planes, the NodePorts from the ingress balancer, "
            f"{len(config.ssh_sources)} raya:sshSources, {len(config.api_sources)} "
            f"raya:apiSources), but Hetzner holds {EFFECTIVE_RULES_PER_FIREWALL} in a firewall "
            f"and applies at most {FIREWALLS_PER_SERVER} to a server "
            f"({FIREWALLS_PER_SERVER * EFFECTIVE_RULES_PER_FIREWALL}; Hetzner's Firewalls FAQ); "
            "accepted: fewer nodes, or fewer raya:sshSources or raya:apiSources"
        )
    return tuple(tuple(firewall) for firewall in firewalls)


def define_firewalls(
    cluster: Cluster,
    layout: tuple[tuple[Rule, ...], ...],
    addresses: Mapping[str, pulumi.Output[str]],
    ingress: pulumi.Output[str] | None,
) -> list[hcloud.Firewall]:
    """The firewalls of `layout`, each applied to every server labelled as this cluster's,
    present and future; `addresses`: each node's public IPv4 address, and `ingress`: the
    ingress balancer's (the public mode). The first keeps the name it had when there was
    one."""
    name = cluster.config.cluster_name

    def address(source: Source) -> pulumi.Input[str]:
        if isinstance(source, str):
            return source
        if isinstance(source, Peer):
            found = addresses[source.name]
        else:
            assert ingress is not None, "the public mode declares its ingress balancer"
            found = ingress
        return found.apply(lambda ip: f"{ip}/32")

    def sources(rule: Rule) -> pulumi.Input[list[str]]:
        if all(isinstance(source, str) for source in rule.sources):
            return [str(source) for source in rule.sources]
        return pulumi.Output.all(*(address(source) for source in rule.sources))

    return [
        hcloud.Firewall(
            "firewall" if k == 0 else f"firewall-{k + 1}",
            name=name if k == 0 else f"{name}-{k + 1}",
            labels={CLUSTER_LABEL: name},
            rules=[
                hcloud.FirewallRuleArgs(
                    direction="in",
                    protocol=rule.protocol,
                    port=rule.port,
                    source_ips=sources(rule),
                    description=rule.description,
                )
                for rule in rules
            ],
            apply_tos=[hcloud.FirewallApplyToArgs(label_selector=f"{CLUSTER_LABEL}={name}")],
        )
        for k, rules in enumerate(layout)
    ]
