"""Where the cloud controller's load balancers get their private address, replayed against the
network the program declares, for a fleet with pools and five control planes.

Hetzner's side, from its API reference ("Attach a Load Balancer to a Network",
POST /load_balancers/{id}/actions/attach_to_network): `ip` is the address asked for ("if you
do not provide this then you will be auto assigned an IP address"); `ip_range` is "the
subnet to attach to. This allows for auto assigning an IP address for a specific subnet.
Providing ip that is not part of ip_range will result in an error"; an address already held
is refused with `ip_not_available`, a network with no free address with
`no_subnet_available`. Which free address Hetzner picks is not documented: the model offers
every candidate, and the tests hold for each.

The controller's side (hetznercloud/hcloud-cloud-controller-manager v1.35.0,
internal/hcops/load_balancer.go, `attachToNetwork`): the Service's
`load-balancer.hetzner.cloud/private-ipv4` is `ip`; its
`load-balancer.hetzner.cloud/private-subnet-ip-range`, or else the controller's
HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE (internal/config/config.go), is `ip_range`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping

import pytest
import yaml

from raya.model.fleet import Cluster, Fleet, Pool, build_cluster
from raya.nodes.addons import CHARTS_MANIFEST, LB
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import Run, reveal
from tests.cloud.program.test_program import EXAMPLE, provider_mocks, run, user_data

Address = ipaddress.IPv4Address
SUBNET = "hcloud:index/networkSubnet:NetworkSubnet"


class HetznerError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclasses.dataclass
class Network:
    subnets: list[ipaddress.IPv4Network]
    held: set[Address]

    def candidates(
        self, ip: Address | None, ip_range: ipaddress.IPv4Network | None
    ) -> set[Address]:
        """The addresses Hetzner may give a load balancer attached with `ip` and `ip_range`."""
        if ip_range is not None and ip_range not in self.subnets:
            raise HetznerError("invalid_input")
        if ip is not None:
            if ip_range is not None and ip not in ip_range:
                raise HetznerError("invalid_input")
            if ip in self.held or not any(ip in subnet for subnet in self.subnets):
                raise HetznerError("ip_not_available")
            return {ip}
        free = {
            address
            for subnet in ([ip_range] if ip_range else self.subnets)
            for address in subnet.hosts()
            if address not in self.held
        }
        if not free:
            raise HetznerError("no_subnet_available")
        return free


def attach_options(annotations: Mapping[str, str], env: Mapping[str, str]) -> tuple[
    Address | None, ipaddress.IPv4Network | None
]:  # fmt: skip
    """`attachToNetwork`: the Service's annotations first, then the controller's variable."""
    ip = annotations.get(f"{LB}/private-ipv4")
    ip_range = annotations.get(
        f"{LB}/private-subnet-ip-range", env.get("HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE")
    )
    return (
        Address(ip) if ip else None,
        ipaddress.IPv4Network(ip_range) if ip_range else None,
    )


def fleet(count: int = 2) -> Cluster:
    config = dataclasses.replace(EXAMPLE.config, control_planes=5)
    pools = (
        Pool("web", "cx33", count, ipaddress.IPv4Network("10.0.1.64/28")),
        Pool("arm", "cax21", 3, ipaddress.IPv4Network("10.0.1.128/27")),
    )
    return build_cluster(config, Fleet(agents=("cx23", "cx23"), pools=pools), "test fleet")


def controller_env(result: Run) -> dict[str, str]:
    files = ignition_files(user_data(result)["control-plane"])
    text = next(data for path, data in files.items() if path.endswith(CHARTS_MANIFEST))
    (chart,) = [
        doc
        for doc in yaml.safe_load_all(text)
        if doc["metadata"]["name"] == "hcloud-cloud-controller-manager"
    ]
    env = yaml.safe_load(chart["spec"]["valuesContent"])["env"]
    return {name: entry["value"] for name, entry in env.items() if "value" in entry}


def traefik_annotations(result: Run) -> dict[str, str]:
    files = ignition_files(user_data(result)["control-plane"])
    text = next(data for path, data in files.items() if path.endswith(CHARTS_MANIFEST))
    (config,) = [doc for doc in yaml.safe_load_all(text) if doc["kind"] == "HelmChartConfig"]
    values = yaml.safe_load(config["spec"]["valuesContent"])
    return dict(values["service"]["annotations"])


def network(result: Run, cluster: Cluster) -> Network:
    """The network as the program leaves it: its subnets, every server's address and the
    registration balancer's held."""
    subnets = [ipaddress.IPv4Network(reveal(r.inputs)["ipRange"])
               for r in result.of_type(SUBNET).values()]  # fmt: skip
    held = {node.private_ip for node in cluster.nodes} | {cluster.config.registration_ip}
    return Network(subnets, held)


@pytest.fixture(scope="module")
def deployed() -> tuple[Run, Cluster]:
    cluster = fleet()
    return run(provider_mocks(), cluster), cluster


def test_the_ingress_balancer_is_addressed_apart_from_every_planned_address(
    deployed: tuple[Run, Cluster],
) -> None:
    result, cluster = deployed
    options = attach_options(traefik_annotations(result), controller_env(result))
    assert options == (None, ipaddress.IPv4Network("10.0.2.0/24"))
    given = network(result, cluster).candidates(*options)
    # Whatever Hetzner picks: none of what raya plans now or for any later node, neither in
    # nodesSubnet (control planes, registration balancer, agents, every address of each
    # pool's block, so a grown pool too) nor elsewhere.
    assert len(given) == 254
    nodes = ipaddress.IPv4Network("10.0.1.0/24")
    assert not any(address in nodes for address in given)
    grown = fleet(count=16)  # pool web's block is full
    assert not given & {node.private_ip for node in grown.nodes}


def test_without_the_range_a_balancer_may_take_a_later_nodes_address(
    deployed: tuple[Run, Cluster],
) -> None:
    """Why the controller is given the range: without it Hetzner may pick an address raya
    gives a node once a pool grows, whose server then gets `ip_not_available`."""
    result, cluster = deployed
    env = {k: v for k, v in controller_env(result).items() if "SUBNET_IP_RANGE" not in k}
    given = network(result, cluster).candidates(*attach_options(traefik_annotations(result), env))
    assert Address("10.0.1.66") in given  # web-2, once pool web has 3 nodes
    assert Address("10.0.1.66") in {node.private_ip for node in fleet(count=3).nodes}


def test_an_address_outside_the_range_is_refused(deployed: tuple[Run, Cluster]) -> None:
    result, cluster = deployed
    annotations = {**traefik_annotations(result), f"{LB}/private-ipv4": "10.0.1.66"}
    options = attach_options(annotations, controller_env(result))
    with pytest.raises(HetznerError, match="invalid_input"):
        network(result, cluster).candidates(*options)
