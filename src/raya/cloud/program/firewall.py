"""The Hetzner Firewalls in front of every server's public addresses.

Inbound, on the public interfaces: SSH and the Kubernetes API from the configured sources,
HTTP and HTTPS (the ingress) and ICMP from anywhere; everything else is dropped: kubelet
(10250), the overlay, NodePorts. Outbound stays open (no outbound rule).

In the private mode (`raya:network: private`) the nodes talk over the Hetzner network, which
firewalls never filter: one firewall holds those rules. In the public mode the nodes talk over
their public addresses, so the firewalls also admit, each only from the addresses that need
it: WireGuard (flannel's `wireguard-native`, the pods' traffic) and the API from every node,
the kubelet from the control planes, etcd's peer and client ports from the control planes
(when there are several), and the NodePorts from raya's load balancers (Traefik's and those
of `raya:loadBalancers`: each reaches its Service's NodePorts by its targets' public
addresses). Every node's address is known before any server exists (its primary IP,
`raya.cloud.program.network.define_public_addresses`), and the balancers' too
(`define_balancers`), so the rules are computed with the nodes, in the same `raya up` that
adds or removes one, and spread over Hetzner's five firewalls a server takes; every firewall
applies to every server of the cluster, by label.

A node's address always sits in the same firewall, whatever other nodes join or leave
(`firewall_of`): Pulumi updates the firewalls independently, so an address moving from one
to another could be missing from both between the two updates. Inside one firewall nothing
can go missing: its whole rule set is replaced by one `set_rules` request
(terraform-provider-hcloud, internal/firewall/resource.go, `resourceFirewallUpdate`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pulumi
import pulumi_hcloud as hcloud

from raya.cloud.program.cluster import CLUSTER_LABEL
from raya.errors import DeployError
from raya.model.config import INGRESS_BALANCER, IPNetwork
from raya.model.fleet import Cluster, Node

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
class Balancer:
    """One of raya's load balancers as a source (`raya.model.config.INGRESS_BALANCER`, or a
    `raya:loadBalancers` name): its public IPv4 address, /32."""

    name: str


Source = str | Peer | Balancer


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
        balancers = (INGRESS_BALANCER, *(balancer.name for balancer in config.load_balancers))
        rules += [
            Rule("udp", WIREGUARD_PORT, nodes, "WireGuard (pod traffic) from the nodes"),
            Rule("tcp", KUBELET_PORT, control_planes, "kubelet from the control planes"),
            Rule(
                "tcp",
                NODE_PORTS,
                tuple(Balancer(name) for name in balancers),
                "NodePorts from raya's load balancers",
            ),
        ]
        if len(control_planes) > 1:
            rules.append(Rule("tcp", ETCD_PORTS, control_planes, "etcd from the control planes"))
    return [rule for rule in rules if rule.sources]


def effective_rules(rules: Sequence[Rule]) -> int:
    """What `rules` weigh against Hetzner's 500 effective rules (one per source address)."""
    return sum(len(rule.sources) for rule in rules)


def firewall_of(node: Node) -> int:
    """Which of the public mode's firewalls holds `node`'s address (0 to 4): its planned
    address modulo 5. That address is the node's identity, which no other node's joining or
    leaving changes (raya.model.fleet: a pool's node `i` is address `i` of the pool's own
    block, an agent of the list its position after the subnet's first 20, control plane `k`
    controlPlaneIp + k), so neither does its firewall; and a pool's consecutive addresses
    spread its nodes evenly over the five."""
    return int(node.private_ip) % FIREWALLS_PER_SERVER


def firewall_layout(cluster: Cluster) -> tuple[tuple[Rule, ...], ...]:
    """The rules of each firewall, in order. The sources of the stack's settings and the
    balancers fill the first firewall, cut into entries of at most SOURCES_PER_RULE sources
    (and the next, past RULES_PER_FIREWALL entries or EFFECTIVE_RULES_PER_FIREWALL effective
    rules); in the public mode, which always has FIREWALLS_PER_SERVER firewalls, each node's
    address goes in its own firewall (`firewall_of`) in every rule that lists it. Refused
    (before anything is declared) when a firewall would exceed Hetzner's limits, or a server
    would need more than FIREWALLS_PER_SERVER of them."""
    rules = openings(cluster)
    count = FIREWALLS_PER_SERVER if cluster.config.public else 1
    firewalls: list[list[tuple[int, Rule]]] = [[] for _ in range(count)]
    k = 0
    for i, rule in enumerate(rules):
        shared = tuple(source for source in rule.sources if not isinstance(source, Peer))
        while shared:
            weight = sum(len(entry.sources) for _, entry in firewalls[k])
            if weight == EFFECTIVE_RULES_PER_FIREWALL or len(firewalls[k]) == RULES_PER_FIREWALL:
                k += 1
                if k == len(firewalls):
                    firewalls.append([])
                continue
            taken = shared[: min(SOURCES_PER_RULE, EFFECTIVE_RULES_PER_FIREWALL - weight)]
            firewalls[k].append((i, replace(rule, sources=taken)))
            shared = shared[len(taken) :]
    homes = {node.name: firewall_of(node) for node in cluster.nodes}
    for i, rule in enumerate(rules):
        held: dict[int, list[Source]] = {}
        for source in rule.sources:
            if isinstance(source, Peer):
                held.setdefault(homes[source.name], []).append(source)
        for home, own in sorted(held.items()):
            firewalls[home].extend(
                (i, replace(rule, sources=tuple(own[j : j + SOURCES_PER_RULE])))
                for j in range(0, len(own), SOURCES_PER_RULE)
            )
    # Each firewall's entries in the order of `openings` (sorted is stable: the settings'
    # sources of a rule before the nodes').
    layout = tuple(
        tuple(entry for _, entry in sorted(firewall, key=lambda item: item[0]))
        for firewall in firewalls
    )
    _check_limits(cluster, rules, layout)
    return layout


def _check_limits(
    cluster: Cluster, rules: Sequence[Rule], layout: tuple[tuple[Rule, ...], ...]
) -> None:
    config = cluster.config
    weights = [effective_rules(firewall) for firewall in layout]
    entries = [len(firewall) for firewall in layout]
    problem = None
    if len(layout) > FIREWALLS_PER_SERVER:
        problem = (
            f"{len(layout)} firewalls, but Hetzner applies at most {FIREWALLS_PER_SERVER} to "
            "a server"
        )
    elif max(weights) > EFFECTIVE_RULES_PER_FIREWALL or max(entries) > RULES_PER_FIREWALL:
        k = max(
            range(len(layout)),
            key=lambda k: (weights[k] > EFFECTIVE_RULES_PER_FIREWALL, weights[k], entries[k]),
        )
        held = sum(1 for node in cluster.nodes if config.public and firewall_of(node) == k)
        problem = (
            f"{weights[k]} effective rules in {entries[k]} entries in firewall "
            f"{firewall_name(config.cluster_name, k)} (the one holding the {held} nodes whose "
            f"planned address is {k} modulo {FIREWALLS_PER_SERVER}"
            + (", and the sources of the stack's settings" if k == 0 else "")
            + f"), but Hetzner holds {EFFECTIVE_RULES_PER_FIREWALL} effective rules and "
            f"{RULES_PER_FIREWALL} entries in a firewall"
        )
    if problem is None:
        return
    raise DeployError(
        f"deploy/fleet/agents.json: {len(cluster.nodes)} nodes need "
        f"{effective_rules(rules)} effective firewall rules (one per source address of each "
        f"rule: WireGuard and the API from every node (the API unless raya:apiSources holds "
        f"0.0.0.0/0), the kubelet and etcd from the control planes, the NodePorts from "
        f"Traefik's balancer and the {len(config.load_balancers)} of raya:loadBalancers, "
        f"{len(config.ssh_sources)} raya:sshSources, {len(config.api_sources)} "
        f"raya:apiSources), spread so that no node's address ever changes firewall: "
        f"{problem} (Hetzner's Firewalls FAQ); accepted: fewer nodes, or fewer "
        "raya:sshSources, raya:apiSources or raya:loadBalancers"
    )


def firewall_name(cluster_name: str, k: int) -> str:
    """The Hetzner name of firewall `k` (from 0): the first keeps the cluster's name, as in
    the private mode."""
    return cluster_name if k == 0 else f"{cluster_name}-{k + 1}"


def define_firewalls(
    cluster: Cluster,
    layout: tuple[tuple[Rule, ...], ...],
    addresses: Mapping[str, pulumi.Output[str]],
    balancers: Mapping[str, pulumi.Output[str]],
) -> list[hcloud.Firewall]:
    """The firewalls of `layout`, each applied to every server labelled as this cluster's,
    present and future; `addresses`: each node's public IPv4 address, and `balancers`: each
    of raya's load balancers' by name (the public mode)."""
    name = cluster.config.cluster_name

    def address(source: Source) -> pulumi.Input[str]:
        if isinstance(source, str):
            return source
        found = (addresses if isinstance(source, Peer) else balancers)[source.name]
        return found.apply(lambda ip: f"{ip}/32")

    def sources(rule: Rule) -> pulumi.Input[list[str]]:
        if all(isinstance(source, str) for source in rule.sources):
            return [str(source) for source in rule.sources]
        return pulumi.Output.all(*(address(source) for source in rule.sources))

    return [
        hcloud.Firewall(
            "firewall" if k == 0 else f"firewall-{k + 1}",
            name=firewall_name(name, k),
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
