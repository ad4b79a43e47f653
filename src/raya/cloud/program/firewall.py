"""The Hetzner Firewall in front of every server's public addresses.

Inbound, on the public interfaces: SSH and the Kubernetes API from the configured sources,
HTTP and HTTPS (the ingress) and ICMP from anywhere; everything else is dropped: kubelet
(10250), flannel's VXLAN (8472/udp), NodePorts. Outbound stays open (no outbound rule).
Hetzner firewalls never filter private networks: the nodes talk to each other freely there.
"""

from __future__ import annotations

import pulumi_hcloud as hcloud

from raya.cloud.program.cluster import CLUSTER_LABEL
from raya.model.config import IPNetwork, StackConfig

ANYWHERE = ("0.0.0.0/0", "::/0")
SSH_PORT = "22"
API_PORT = "6443"
WEB_PORTS = ("80", "443")


def firewall_rules(config: StackConfig) -> list[hcloud.FirewallRuleArgs]:
    """The inbound rules; a source list left empty closes its port."""

    def tcp(port: str, sources: tuple[str, ...], description: str) -> hcloud.FirewallRuleArgs:
        return hcloud.FirewallRuleArgs(
            direction="in",
            protocol="tcp",
            port=port,
            source_ips=list(sources),
            description=description,
        )

    def cidrs(sources: tuple[IPNetwork, ...]) -> tuple[str, ...]:
        return tuple(str(source) for source in sources)

    rules = []
    if config.ssh_sources:
        rules.append(tcp(SSH_PORT, cidrs(config.ssh_sources), "SSH from raya:sshSources"))
    if config.api_sources:
        rules.append(tcp(API_PORT, cidrs(config.api_sources), "Kubernetes API, raya:apiSources"))
    rules += [tcp(port, ANYWHERE, "ingress") for port in WEB_PORTS]
    rules.append(
        hcloud.FirewallRuleArgs(
            direction="in", protocol="icmp", source_ips=list(ANYWHERE), description="ICMP"
        )
    )
    return rules


def define_firewall(config: StackConfig) -> hcloud.Firewall:
    """The firewall, applied to every server labelled as this cluster's, present and future."""
    return hcloud.Firewall(
        "firewall",
        name=config.cluster_name,
        labels={CLUSTER_LABEL: config.cluster_name},
        rules=firewall_rules(config),
        apply_tos=[
            hcloud.FirewallApplyToArgs(label_selector=f"{CLUSTER_LABEL}={config.cluster_name}")
        ],
    )
