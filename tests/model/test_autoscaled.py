"""Autoscaled pools in the fleet file: `min` and `max` instead of `count`, a subnet of their own
(issue 39, part 1, fleet side)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from raya.errors import ConfigError
from raya.model.config import parse_stack_config
from raya.model.fleet import build_cluster, load_fleet, sold_problem

BASE: dict[str, Any] = {
    "authorizedUsers": ["octo-alice"],
    "managedSubdomain": "raya",
    "parentZone": "example.com",
    "acmeEmail": "ops@example.org",
}
# The defaults: networkRange 10.0.0.0/16, nodesSubnet 10.0.1.0/24.
BURST = {"name": "burst", "type": "cpx31", "min": 1, "max": 5, "addresses": "10.0.16.0/24"}


def config(**changes: Any) -> Any:
    return parse_stack_config({**BASE, **changes}, "Pulumi.test.yaml")


def fleet_of(tmp_path: Path, *pools: dict[str, Any], agents: tuple[str, ...] = ()) -> Any:
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": list(agents), "pools": list(pools)}))
    return load_fleet(path)


def refusal(tmp_path: Path, *pools: dict[str, Any], **stack: Any) -> str:
    with pytest.raises(ConfigError) as refused:
        build_cluster(config(**stack), fleet_of(tmp_path, *pools, agents=("cx23",)), "agents.json")
    return str(refused.value)


def test_an_autoscaled_pool_has_bounds_and_no_planned_node(tmp_path: Path) -> None:
    fleet = fleet_of(tmp_path, {**BURST, "taints": ["burst=yes:PreferNoSchedule"]},
                     agents=("cx23",))  # fmt: skip
    cluster = build_cluster(config(), fleet, "agents.json")
    (pool,) = cluster.autoscaled
    assert (pool.name, pool.min_size, pool.max_size, pool.count) == ("burst", 1, 5, 0)
    assert pool.addresses == ipaddress.IPv4Network("10.0.16.0/24")
    # Only the list form's agent: the autoscaler makes the pool's nodes.
    assert [node.name for node in cluster.agents] == ["agent-0"]
    assert not any(node.pool == "burst" for node in cluster.nodes)


def test_min_may_be_zero_and_equal_to_max(tmp_path: Path) -> None:
    fleet = fleet_of(tmp_path, {**BURST, "min": 0, "max": 1},
                     {**BURST, "name": "steady", "min": 3, "max": 3,
                      "addresses": "10.0.17.0/29"}, agents=("cx23",))  # fmt: skip
    cluster = build_cluster(config(), fleet, "agents.json")
    assert [(p.min_size, p.max_size) for p in cluster.autoscaled] == [(0, 1), (3, 3)]


@pytest.mark.parametrize(
    ("change", "field", "accepted"),
    [
        ({"count": 2}, "min", "not both"),
        ({"max": None}, "max", "both 'min' and 'max'"),
        ({"min": None}, "min", "both 'min' and 'max'"),
        ({"min": -1}, "min", "0 or more"),
        ({"min": True}, "min", "0 or more"),
        ({"max": 0, "min": 0}, "max", "1 or more"),
        ({"max": 2.5}, "max", "1 or more"),
        ({"min": 4, "max": 3}, "min", "0 to 3"),
        ({"min": None, "max": None}, "count", "'min' and 'max'"),
    ],
)
def test_bad_bounds_name_file_field_and_accepted(
    tmp_path: Path, change: dict[str, Any], field: str, accepted: str
) -> None:
    pool = {**BURST, **change}
    pool = {key: value for key, value in pool.items() if value is not None}
    with pytest.raises(ConfigError) as refused:
        fleet_of(tmp_path, pool)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'agents.json'}: pools[0] (burst): field '{field}'")
    assert accepted in message


@pytest.mark.parametrize(
    ("addresses", "what"),
    [
        # Where raya plans the control planes', load balancers' and nodes' addresses.
        ("10.0.1.0/24", "overlaps nodesSubnet 10.0.1.0/24"),
        ("10.0.0.0/23", "overlaps nodesSubnet 10.0.1.0/24"),
        ("10.1.0.0/24", "outside networkRange 10.0.0.0/16"),
        # The cloud controller's balancers: the block after nodesSubnet by default.
        ("10.0.2.0/24", "overlaps raya:loadBalancerSubnet 10.0.2.0/24"),
        ("10.0.2.128/25", "overlaps raya:loadBalancerSubnet 10.0.2.0/24"),
        # 10.0.0.1, the first address of the network.
        ("10.0.0.0/28", "holds the network's gateway 10.0.0.1"),
    ],
)
def test_the_subnet_keeps_out_of_planned_addresses(
    tmp_path: Path, addresses: str, what: str
) -> None:
    message = refusal(tmp_path, {**BURST, "addresses": addresses})
    assert message.startswith("agents.json: pools[0] (burst): field 'addresses'")
    assert what in message


def test_two_autoscaled_pools_share_no_subnet(tmp_path: Path) -> None:
    message = refusal(tmp_path, BURST, {**BURST, "name": "more", "addresses": "10.0.16.128/25"})
    assert message.startswith("agents.json: pools[1] (more): field 'addresses'")
    assert "overlaps pool burst's 10.0.16.0/24" in message


def test_max_fits_the_subnet(tmp_path: Path) -> None:
    # A /29 is 8 addresses, of which the first and last are no server's: 6 servers.
    build_cluster(config(), fleet_of(tmp_path, {**BURST, "max": 6, "addresses": "10.0.16.0/29"},
                                     agents=("cx23",)), "agents.json")  # fmt: skip
    message = refusal(tmp_path, {**BURST, "max": 7, "addresses": "10.0.16.0/29"})
    assert "field 'max' is 7, but its addresses 10.0.16.0/29 hold at most 6 servers" in message


def test_the_autoscalers_server_names_stay_hostnames(tmp_path: Path) -> None:
    # `<cluster>-<pool>-<16 hex digits>` within 63 characters: cluster and pool 45 at most.
    cluster_name = "c" * 25
    fine = {**BURST, "name": "p" * 20}
    build_cluster(config(clusterName=cluster_name), fleet_of(tmp_path, fine, agents=("cx23",)),
                  "agents.json")  # fmt: skip
    message = refusal(tmp_path, fine, clusterName=cluster_name + "c")
    assert message.startswith(f"agents.json: pools[0] ({'p' * 20}): field 'name'")
    assert "up to 64 characters" in message
    assert "at most 45 characters" in message


def test_an_autoscaled_pool_that_keeps_a_node_is_somewhere_for_the_add_ons(
    tmp_path: Path,
) -> None:
    stack = config(controlPlaneSchedulable=False)
    fleet = fleet_of(tmp_path, BURST)
    assert build_cluster(stack, fleet, "agents.json").autoscaled
    with pytest.raises(ConfigError, match="no agents"):
        build_cluster(stack, fleet_of(tmp_path, {**BURST, "min": 0}), "agents.json")


def test_the_type_of_an_autoscaled_pool_must_be_sold_where_it_is(tmp_path: Path) -> None:
    fleet = fleet_of(tmp_path, BURST, agents=("cx23",))
    cluster = build_cluster(config(), fleet, "agents.json")
    sold = {"cx23": ("nbg1",), "cx33": ("nbg1",), "cpx31": ("fsn1",)}
    problem = sold_problem(cluster, fleet, sold, fleet_source="agents.json",
                           stack_source="Pulumi.test.yaml")  # fmt: skip
    assert problem is not None
    assert problem.startswith("agents.json: pools[0] (burst): field 'type' is 'cpx31'")


def test_an_autoscaled_pools_max_counts_against_one_networks_100_servers(
    tmp_path: Path,
) -> None:
    """Hetzner's network holds 100 servers: 1 control plane, 1 agent and a pool of up to 98
    fit; up to 99 do not."""
    build_cluster(config(), fleet_of(tmp_path, {**BURST, "max": 98}, agents=("cx23",)),
                  "agents.json")  # fmt: skip
    message = refusal(tmp_path, {**BURST, "max": 99})
    assert "101 nodes (control planes: 1, agents: 1, autoscaled at most: 99)" in message


def test_an_autoscaled_pool_is_refused_in_the_public_mode(tmp_path: Path) -> None:
    message = refusal(tmp_path, BURST, network="public")
    assert message.startswith(
        "agents.json: pool burst is autoscaled (min, max), but raya:network is public"
    )
