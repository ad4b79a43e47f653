"""The fleet file, each node's identity, addressing limits and node passwords."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from raya.errors import ConfigError
from raya.model.config import parse_stack_config
from raya.model.fleet import (
    Fleet,
    Node,
    build_cluster,
    fleet_file,
    load_fleet,
    node_password,
    sold_problem,
)
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, find_root, load_cluster
from tests.pool_change import ADDRESSES_AFTER, ADDRESSES_BEFORE, AFTER, BEFORE, STAYING
from tests.support import REPO

BASE: dict[str, Any] = {
    "authorizedUsers": ["octo-alice"],
    "managedSubdomain": "raya",
    "parentZone": "example.com",
    "acmeEmail": "ops@example.org",
}


def config(**changes: Any) -> Any:
    return parse_stack_config({**BASE, **changes}, "Pulumi.test.yaml")


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_agents_identity_comes_from_position() -> None:
    cluster = build_cluster(config(), ("cx23", "cx33", "cpx21"), "agents.json")
    assert cluster.control_plane == Node(
        name="control-plane",
        role="control-plane",
        index=None,
        private_ip=ipaddress.IPv4Address("10.0.1.10"),
        dns_label="cp",
        server_type="cx33",
    )
    assert cluster.agents[2] == Node(
        name="agent-2",
        role="agent",
        index=2,
        private_ip=ipaddress.IPv4Address("10.0.1.22"),
        dns_label="a2",
        server_type="cpx21",
    )
    assert [node.name for node in cluster.nodes] == [
        "control-plane",
        "agent-0",
        "agent-1",
        "agent-2",
    ]
    assert [str(node.private_ip) for node in cluster.agents] == [
        "10.0.1.20",
        "10.0.1.21",
        "10.0.1.22",
    ]
    assert [cluster.dns_name(node) for node in cluster.nodes] == [
        "cp.raya.example.com.",
        "a0.raya.example.com.",
        "a1.raya.example.com.",
        "a2.raya.example.com.",
    ]


def test_addresses_follow_the_configured_subnet() -> None:
    cluster = build_cluster(
        config(networkRange="10.8.0.0/16", nodesSubnet="10.8.4.0/24", controlPlaneIp="10.8.4.2"),
        ("cx23",),
        "agents.json",
    )
    assert cluster.control_plane.private_ip == ipaddress.IPv4Address("10.8.4.2")
    assert cluster.agents[0].private_ip == ipaddress.IPv4Address("10.8.4.20")


def test_no_agents_is_a_cluster_of_one_if_the_control_plane_takes_workloads() -> None:
    cluster = build_cluster(config(controlPlaneSchedulable=True), (), "agents.json")
    assert cluster.agents == ()
    assert cluster.nodes == (cluster.control_plane,)


def test_no_agents_and_a_tainted_control_plane_is_refused() -> None:
    """The add-ons' HelmChart install jobs tolerate no taint of the control plane (k3s'
    helm-controller gives tolerations to `bootstrap` charts only), nor do their pods."""
    with pytest.raises(ConfigError) as caught:
        build_cluster(config(), (), "deploy/fleet/agents.json")
    assert str(caught.value) == (
        "deploy/fleet/agents.json: no agents, and the control plane is tainted "
        "(raya:controlPlaneSchedulable is false), so the add-ons would never be scheduled; "
        "accepted: at least one agent, or raya:controlPlaneSchedulable: true"
    )
    # One agent is enough.
    assert len(build_cluster(config(), ("cx23",), "deploy/fleet/agents.json").agents) == 1


def test_a_subnet_holds_agents_up_to_its_last_host() -> None:
    # More than one Hetzner network holds: the public mode's.
    full = build_cluster(config(network="public"), ("cx23",) * 235, "agents.json")
    assert str(full.agents[-1].private_ip) == "10.0.1.254"
    assert full.agents[-1].name == "agent-234"
    with pytest.raises(ConfigError) as caught:
        build_cluster(config(network="public"), ("cx23",) * 236, "deploy/fleet/agents.json")
    assert str(caught.value) == (
        "deploy/fleet/agents.json: 236 agents, but nodesSubnet 10.0.1.0/24 addresses at most "
        "235 from 10.0.1.20"
    )


def test_the_private_mode_stops_at_one_networks_100_servers() -> None:
    # Hetzner's Networks FAQ: a network holds at most 100 servers; every node of the private
    # mode is on the cluster's one network.
    wide = {"nodesSubnet": "10.0.0.0/22", "controlPlaneIp": "10.0.0.10"}
    assert len(build_cluster(config(**wide), ("cx23",) * 99, "f").nodes) == 100
    with pytest.raises(ConfigError) as caught:
        build_cluster(config(**wide), ("cx23",) * 100, "deploy/fleet/agents.json")
    assert str(caught.value) == (
        "deploy/fleet/agents.json: 101 nodes (control planes: 1, agents: 100), but raya:network "
        "is private and a Hetzner network holds at most 100 servers (Hetzner's Networks FAQ); "
        "accepted: at most 100 nodes, or raya:network: public in a new stack (the nodes talk "
        'over their public addresses: docs/fleet.md, "Beyond 100 nodes")'
    )
    # Control planes count as much as agents: 5 and 96 agents are 101 servers too.
    with pytest.raises(ConfigError, match=r"^f: 101 nodes \(control planes: 5, agents: 96\)"):
        build_cluster(config(**wide, controlPlanes=5), ("cx23",) * 96, "f")
    public = build_cluster(config(**wide, network="public"), ("cx23",) * 100, "f")
    assert len(public.nodes) == 101


def test_a_thousand_agents_in_pools_have_their_own_names_addresses_and_records(
    tmp_path: Path,
) -> None:
    fleet = load_fleet(
        write(
            tmp_path,
            {"pools": [
                {"name": "web", "type": "cx23", "count": 500, "addresses": "10.0.4.0/23"},
                {"name": "batch", "type": "cpx31", "count": 500, "addresses": "10.0.6.0/23"},
            ]},
        )
    )  # fmt: skip
    wide = {"nodesSubnet": "10.0.0.0/20", "controlPlaneIp": "10.0.0.10", "controlPlanes": 5}
    with pytest.raises(ConfigError, match=r"^f: 1005 nodes .*raya:network: public"):
        build_cluster(config(**wide), fleet, "f")
    cluster = build_cluster(config(**wide, network="public"), fleet, "f")
    assert len(cluster.agents) == 1000 and len(cluster.nodes) == 1005
    names = [node.name for node in cluster.agents]
    assert names[0] == "web-0" and names[499] == "web-499" and names[500] == "batch-0"
    assert len(set(names)) == 1000
    assert len({node.private_ip for node in cluster.nodes}) == 1005
    assert str(cluster.agents[-1].private_ip) == "10.0.7.243"  # batch-499
    records = {cluster.dns_name(node) for node in cluster.nodes}
    assert len(records) == 1005 and "batch-499.raya.example.com." in records


def test_small_subnet_capacity() -> None:
    small = config(nodesSubnet="10.0.1.0/27", controlPlaneIp="10.0.1.10")
    assert len(build_cluster(small, ("cx23",) * 11, "f").agents) == 11  # .20 to .30
    with pytest.raises(ConfigError, match=r"^f: 12 agents, but nodesSubnet 10\.0\.1\.0/27 "):
        build_cluster(small, ("cx23",) * 12, "f")
    tiny = config(
        nodesSubnet="10.0.1.0/28", controlPlaneIp="10.0.1.10", controlPlaneSchedulable=True
    )
    assert build_cluster(tiny, (), "f").agents == ()
    with pytest.raises(ConfigError, match=r"^f: 1 agents, but .* addresses at most 0 from"):
        build_cluster(tiny, ("cx23",), "f")


def test_control_plane_inside_the_agents_range_is_an_error() -> None:
    overlapping = config(controlPlaneIp="10.0.1.22")
    build_cluster(overlapping, ("cx23", "cx23"), "f")  # .20 and .21: no overlap yet
    with pytest.raises(ConfigError) as caught:
        build_cluster(overlapping, ("cx23",) * 3, "deploy/fleet/agents.json")
    assert str(caught.value) == (
        "deploy/fleet/agents.json: agents take 10.0.1.20-10.0.1.22, which overlaps "
        "raya:controlPlaneIp 10.0.1.22"
    )


def test_load_fleet(tmp_path: Path) -> None:
    assert load_fleet(write(tmp_path, {"agents": ["cx23", "cx33"]})) == Fleet(("cx23", "cx33"))
    assert load_fleet(write(tmp_path, {"agents": []})) == Fleet(())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "fleet file not found"),
        ("{", "not JSON: "),
        (["cx23"], 'expected {"agents": ["cx23", ...]} or {"pools": [{"name": ...}]}'),
        ({}, 'expected {"agents": ["cx23", ...]} or {"pools": [{"name": ...}]}'),
        ({"agents": "cx23"}, "'agents' must be a list of Hetzner server types"),
        (
            {"agents": [], "nodes": [], "comment": "x"},
            "unknown top-level key(s) comment, nodes; accepted: agents, pools",
        ),
        ({"agents": ["cx23", ""]}, "agents[1] is ''; accepted: a Hetzner server type such as cx23"),
        ({"agents": ["cx23", None]}, "agents[1] is None; accepted: a Hetzner server type"),
        ({"agents": [23]}, "agents[0] is 23; accepted: a Hetzner server type"),
        ({"agents": ["cx-23"]}, "agents[0] is 'cx-23'; accepted: a Hetzner server type"),
        ({"agents": [" cx23"]}, "agents[0] is ' cx23'; accepted: a Hetzner server type"),
        ({"agents": ["CX23"]}, "agents[0] is 'CX23'; accepted: a Hetzner server type"),
        (
            {"agents": ["cx23", "ax41"]},
            "agents[1] is 'ax41', of no Hetzner server family; accepted: a type of cx, cpx, "
            "cax, ccx such as cx23 or cax21",
        ),
    ],
)
def test_bad_fleet_file(tmp_path: Path, data: object, message: str) -> None:
    path = tmp_path / "agents.json"
    if data is not None:
        write(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load_fleet(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_node_password_is_an_hmac_of_secret_and_node_name() -> None:
    password = node_password("s3cret", "agent-3")
    # The message agents have had since their passwords were derived from their position.
    expected = hmac.new(b"s3cret", b"raya node password agent-3", hashlib.sha256).hexdigest()
    assert password == expected
    assert len(password) == 64
    names = ["control-plane", *(f"agent-{i}" for i in range(50))]
    assert len({node_password("s3cret", name) for name in names}) == 51
    assert node_password("other", "agent-3") != password


def test_example_and_repository_fleets_load() -> None:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    assert [node.server_type for node in example.agents] == ["cx23", "cx23", "cx33"]
    assert load_cluster(REPO, "prod").config.authorized_users


def test_find_root(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: raya\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_root(deep) == tmp_path
    assert find_root(tmp_path) == tmp_path
    assert find_root(REPO / "src" / "raya") == REPO


def test_find_root_outside_a_project(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        find_root(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path}: not inside a raya project (no Pulumi.yaml here or above)"
    )


def test_load_cluster_names_the_fleet_file(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.dev.yaml").write_text(
        "config:\n  raya:authorizedUsers: [a]\n  raya:managedSubdomain: raya\n"
        "  raya:parentZone: example.com\n  raya:nodesSubnet: 10.0.1.0/27\n"
        "  raya:acmeEmail: ops@example.org\n"
    )
    fleet = fleet_file(tmp_path)
    fleet.parent.mkdir(parents=True)
    fleet.write_text(json.dumps({"agents": ["cx23"] * 12}))
    with pytest.raises(ConfigError) as caught:
        load_cluster(tmp_path, "dev")
    assert str(caught.value).startswith(f"{fleet}: 12 agents, but nodesSubnet 10.0.1.0/27")


@pytest.mark.parametrize("count", [1, 3, 5])
def test_control_planes_grow_after_the_first(count: int) -> None:
    cluster = build_cluster(config(controlPlanes=count), ("cx23",), "agents.json")
    # The first keeps its name, address and record at every size: growing renames nothing.
    expected = [("control-plane", "10.0.1.10", "cp")] + [
        (f"control-plane-{k}", f"10.0.1.{10 + k}", f"cp{k}") for k in range(1, count)
    ]
    assert [
        (node.name, str(node.private_ip), node.dns_label) for node in cluster.control_planes
    ] == expected
    assert {(node.role, node.index) for node in cluster.control_planes} == {("control-plane", None)}
    assert cluster.control_plane.name == "control-plane"
    assert [node.name for node in cluster.nodes][count:] == ["agent-0"]
    assert str(cluster.agents[0].private_ip) == "10.0.1.20"


def test_agents_may_not_take_the_control_planes_block() -> None:
    below = config(controlPlanes=3, controlPlaneIp="10.0.1.16")  # block .16-.21
    with pytest.raises(ConfigError) as caught:
        build_cluster(below, ("cx23",), "deploy/fleet/agents.json")
    assert str(caught.value) == (
        "deploy/fleet/agents.json: agents take 10.0.1.20-10.0.1.20, which overlaps "
        "10.0.1.16-10.0.1.21, held by raya:controlPlanes 3 (the control planes and their "
        "private load balancer)"
    )
    # .14-.19 ends just below the first agent's address.
    highest = config(controlPlanes=5, controlPlaneIp="10.0.1.14")
    assert len(build_cluster(highest, ("cx23",), "f").agents) == 1


# A mixed fleet: the list form kept, an x86 pool with labels and taints, an ARM pool in
# another location of the network zone (eu-central).
MIXED: dict[str, Any] = {
    "agents": ["cx23", "cx23"],
    "pools": [
        {
            "name": "web",
            "type": "cx33",
            "count": 2,
            "addresses": "10.0.1.64/28",
            "labels": {"tier": "web", "example.com/team": "shop"},
            "taints": ["dedicated=web:NoSchedule"],
        },
        {
            "name": "arm",
            "type": "cax21",
            "count": 3,
            "addresses": "10.0.1.128/27",
            "location": "fsn1",
        },
    ],
}


def test_every_planned_address_is_apart_with_five_control_planes_and_pools(
    tmp_path: Path,
) -> None:
    """The whole address plan of a fleet with the list form, two pools and five control
    planes: each node, the registration balancer, each pool's block and the subnet where
    Hetzner addresses the cloud controller's balancers; no two of them share an address."""
    stack = config(controlPlanes=5)
    cluster = build_cluster(stack, load_fleet(write(tmp_path, MIXED)), "agents.json")
    plan: dict[str, ipaddress.IPv4Network] = {
        **{
            node.name: ipaddress.IPv4Network(node.private_ip)
            for node in cluster.nodes
            if node.pool is None
        },
        "registration balancer": ipaddress.IPv4Network(stack.registration_ip),
        "pool web": ipaddress.IPv4Network("10.0.1.64/28"),
        "pool arm": ipaddress.IPv4Network("10.0.1.128/27"),
        "cloud controller's balancers": stack.load_balancer_subnet,
    }
    assert {name: str(block) for name, block in plan.items()} == {
        "control-plane": "10.0.1.10/32",
        "control-plane-1": "10.0.1.11/32",
        "control-plane-2": "10.0.1.12/32",
        "control-plane-3": "10.0.1.13/32",
        "control-plane-4": "10.0.1.14/32",
        "agent-0": "10.0.1.20/32",
        "agent-1": "10.0.1.21/32",
        "registration balancer": "10.0.1.15/32",
        "pool web": "10.0.1.64/28",
        "pool arm": "10.0.1.128/27",
        "cloud controller's balancers": "10.0.2.0/24",
    }
    pooled = {node.name: node.private_ip for node in cluster.nodes if node.pool}
    assert all(address in plan[f"pool {name.split('-')[0]}"] for name, address in pooled.items())
    names = sorted(plan)
    for i, one in enumerate(names):
        for other in names[i + 1 :]:
            assert not plan[one].overlaps(plan[other]), (one, other)
    assert all(block.subnet_of(stack.network_range) for block in plan.values())


def test_a_balancers_subnet_over_a_pool_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        config(controlPlanes=5, loadBalancerSubnet="10.0.1.64/28")  # MIXED's pool web
    assert str(caught.value).startswith(
        "Pulumi.test.yaml: raya:loadBalancerSubnet is 10.0.1.64/28, which overlaps nodesSubnet "
        "10.0.1.0/24"
    )


def identities(cluster: Any) -> dict[str, tuple[str, str, str]]:
    """Every node's name -> (address, DNS label, node password): what must never move."""
    return {
        node.name: (str(node.private_ip), node.dns_label, node_password("s3cret", node.name))
        for node in cluster.nodes
    }


def test_pool_nodes_have_their_own_names_addresses_and_records(tmp_path: Path) -> None:
    cluster = build_cluster(config(), load_fleet(write(tmp_path, MIXED)), "agents.json")
    table = {
        node.name: (
            str(node.private_ip),
            node.dns_label,
            node.server_type,
            node.architecture,
            node.location,
            node.labels,
            node.taints,
        )
        for node in cluster.agents
    }
    web = ((("example.com/team", "shop"), ("tier", "web")), ("dedicated=web:NoSchedule",))
    assert table == {
        "agent-0": ("10.0.1.20", "a0", "cx23", "x86", None, (), ()),
        "agent-1": ("10.0.1.21", "a1", "cx23", "x86", None, (), ()),
        "web-0": ("10.0.1.64", "web-0", "cx33", "x86", None, *web),
        "web-1": ("10.0.1.65", "web-1", "cx33", "x86", None, *web),
        "arm-0": ("10.0.1.128", "arm-0", "cax21", "arm", "fsn1", (), ()),
        "arm-1": ("10.0.1.129", "arm-1", "cax21", "arm", "fsn1", (), ()),
        "arm-2": ("10.0.1.130", "arm-2", "cax21", "arm", "fsn1", (), ()),
    }
    assert {node.pool for node in cluster.agents} == {None, "web", "arm"}
    assert cluster.control_plane.architecture == "x86"


def test_growing_adding_and_removing_pools_moves_no_node_that_stays(tmp_path: Path) -> None:
    before = identities(build_cluster(config(), load_fleet(write(tmp_path, BEFORE)), "f"))
    after = identities(build_cluster(config(), load_fleet(write(tmp_path, AFTER)), "f"))
    assert {name: value[0] for name, value in before.items()} == ADDRESSES_BEFORE
    assert {name: value[0] for name, value in after.items()} == ADDRESSES_AFTER
    stayed = before.keys() & after.keys()
    assert stayed == STAYING
    assert all(before[name] == after[name] for name in stayed)


def test_the_list_form_is_the_fleet_it_always_was(tmp_path: Path) -> None:
    listed = build_cluster(config(), load_fleet(write(tmp_path, {"agents": ["cx23"] * 3})), "f")
    assert listed == build_cluster(config(), ("cx23",) * 3, "f")
    assert [(n.name, str(n.private_ip), n.dns_label) for n in listed.agents] == [
        ("agent-0", "10.0.1.20", "a0"),
        ("agent-1", "10.0.1.21", "a1"),
        ("agent-2", "10.0.1.22", "a2"),
    ]
    assert all(n.pool is None and n.labels == () and n.taints == () for n in listed.agents)


def pool(**changes: Any) -> dict[str, Any]:
    return {"name": "web", "type": "cx33", "count": 1, "addresses": "10.0.1.64/28", **changes}


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ("web", "'pools' must be a list of pools"),
        (["web"], "pools[0]: expected an object with name, type, count, addresses"),
        ([pool(), pool(addresses="10.0.1.96/28")], "pools[1] (web): field 'name' is used twice"),
        (
            [pool(size=3)],
            "pools[0] (web): field 'size' is not a pool field; accepted: name, type, count, min, "
            "max, addresses, labels, taints, location, maxUnavailable",
        ),
        ([{"name": "web", "type": "cx33", "count": 1}], "pools[0] (web): field 'addresses' is "
         "required"),
        ([pool(name="Web")], "pools[0]: field 'name' is 'Web'; accepted: 1-20 lowercase"),
        ([pool(name="web-")], "pools[0]: field 'name' is 'web-'; accepted: 1-20 lowercase"),
        ([pool(name="w" * 21)], "pools[0]: field 'name' is 'wwwwwwwwwwwwwwwwwwwww'; accepted"),
        ([pool(name="agent")], "pools[0] (agent): field 'name' is 'agent', reserved"),
        ([pool(name="control-plane")], "pools[0]: field 'name' is 'control-plane'; accepted: 1-20"),
        ([pool(type="cx 33")], "pools[0] (web): field 'type' is 'cx 33'; accepted: a Hetzner"),
        ([pool(type="zz9")], "pools[0] (web): field 'type' is 'zz9', of no Hetzner server family"),
        ([pool(count=-1)], "pools[0] (web): field 'count' is -1; accepted: a whole number, 0 or"),
        ([pool(count=1.5)], "pools[0] (web): field 'count' is 1.5; accepted: a whole number"),
        ([pool(count=True)], "pools[0] (web): field 'count' is True; accepted: a whole number"),
        ([pool(count="2")], "pools[0] (web): field 'count' is '2'; accepted: a whole number"),
        ([pool(addresses="10.0.1.65/28")], "pools[0] (web): field 'addresses' is '10.0.1.65/28'"
         "; accepted: an IPv4 CIDR without host bits"),
        ([pool(addresses="10.0.1.64")], "pools[0] (web): field 'addresses' is '10.0.1.64'"),
        ([pool(location="fra1")], "pools[0] (web): field 'location' is 'fra1'; accepted: fsn1, "
         "nbg1, hel1, ash, hil, sin"),
        ([pool(labels=["tier=web"])], "pools[0] (web): field 'labels' is ['tier=web']; accepted"),
        ([pool(labels={"tier": 3})], "pools[0] (web): field 'labels' value 3 is not text"),
        ([pool(labels={"-tier": "web"})], "pools[0] (web): field 'labels' key '-tier': its name"),
        ([pool(labels={"t" * 64: "x"})], "pools[0] (web): field 'labels' key 'tttttttttttt"),
        ([pool(labels={"Example.com/tier": "x"})], "pools[0] (web): field 'labels' key "
         "'Example.com/tier': its prefix must be a lowercase DNS subdomain"),
        ([pool(labels={"tier": "web app"})], "pools[0] (web): field 'labels' value 'web app':"),
        ([pool(labels={"tier": "v" * 64})], "pools[0] (web): field 'labels' value 'vvvvvv"),
        ([pool(labels={"node-role.kubernetes.io/worker": "true"})], "pools[0] (web): field "
         "'labels' key 'node-role.kubernetes.io/worker': a kubelet may set no such label"),
        ([pool(labels={"k8s.io/x": ""})], "pools[0] (web): field 'labels' key 'k8s.io/x': a"),
        ([pool(taints="a:NoSchedule")], "pools[0] (web): field 'taints' is 'a:NoSchedule'"),
        ([pool(taints=["dedicated=web"])], "pools[0] (web): field 'taints' 'dedicated=web' is "
         "not key[=value]:Effect"),
        ([pool(taints=["dedicated=web:NoSchedul"])], "pools[0] (web): field 'taints' "
         "'dedicated=web:NoSchedul': effect 'NoSchedul'; accepted: NoSchedule, "
         "PreferNoSchedule, NoExecute"),
        ([pool(taints=["=web:NoSchedule"])], "pools[0] (web): field 'taints' '=web:NoSchedule':"
         " key '': its name"),
        ([pool(taints=["a=b c:NoExecute"])], "pools[0] (web): field 'taints' 'a=b c:NoExecute':"
         " value 'b c'"),
        ([pool(taints=["a=1:NoSchedule", "a=2:NoSchedule"])], "pools[0] (web): field 'taints' "
         "has key and effect of 'a=2:NoSchedule' twice"),
    ],
)
def test_bad_pools(tmp_path: Path, pools: object, message: str) -> None:
    path = write(tmp_path, {"pools": pools})
    with pytest.raises(ConfigError) as caught:
        load_fleet(path)
    assert str(caught.value).startswith(f"{path}: {message}")


MAX_UNAVAILABLE_ACCEPTED = (
    "accepted: a whole number of nodes from 1 (such as 2) or a percentage of the pool from 1% "
    'to 100% as a string (such as "25%")'
)


@pytest.mark.parametrize(
    "value", [0, -1, "0%", "101%", "2", "%", "", "1.5%", "05%", 1.5, 2.0, True, None, ["2"]]
)
def test_a_pools_max_unavailable_is_a_count_or_a_percentage_string(
    tmp_path: Path, value: object
) -> None:
    path = write(tmp_path, {"pools": [pool(maxUnavailable=value)]})
    with pytest.raises(ConfigError) as caught:
        load_fleet(path)
    assert str(caught.value) == (
        f"{path}: pools[0] (web): field 'maxUnavailable' is {value!r}; {MAX_UNAVAILABLE_ACCEPTED}"
    )


def test_a_pools_max_unavailable_resolves_as_the_rolls_option(tmp_path: Path) -> None:
    pools = [pool(maxUnavailable=3), pool(name="db", addresses="10.0.1.96/28",
             maxUnavailable="25%"), pool(name="gpu", addresses="10.0.1.112/28")]  # fmt: skip
    fleet = load_fleet(write(tmp_path, {"pools": pools}))
    limits = {p.name: p.max_unavailable for p in fleet.pools}
    assert limits["gpu"] is None  # the roll's --max-unavailable
    assert limits["web"] is not None and limits["web"].of(20) == 3
    assert limits["db"] is not None and limits["db"].of(20) == 5 and limits["db"].of(3) == 1


def test_good_labels_and_taints_pass(tmp_path: Path) -> None:
    fleet = load_fleet(
        write(
            tmp_path,
            {
                "pools": [
                    pool(
                        labels={
                            "node.kubernetes.io/pool": "web",
                            "kubelet.kubernetes.io/pool": "web",
                            "example.com/empty": "",
                            "A_b.c-1": "X_y.z-9",
                        },
                        taints=["a:NoSchedule", "a:NoExecute", "b=:PreferNoSchedule"],
                    )
                ]
            },
        )
    )
    assert fleet.pools[0].taints == ("a:NoSchedule", "a:NoExecute", "b=:PreferNoSchedule")


@pytest.mark.parametrize(
    ("pools", "stack", "message"),
    [
        (
            [pool(location="ash")],
            {},
            "pools[0] (web): field 'location' is 'ash', in network zone us-east, but the "
            "cluster's network is in eu-central; accepted: fsn1, nbg1, hel1",
        ),
        (
            [pool(addresses="10.0.2.0/28")],
            {},
            "pools[0] (web): field 'addresses' is 10.0.2.0/28, outside nodesSubnet 10.0.1.0/24",
        ),
        (
            [pool(addresses="10.0.1.0/27")],
            {},
            "pools[0] (web): field 'addresses' is 10.0.1.0/27, which takes from the first 20 "
            "addresses of nodesSubnet (the control planes'); accepted: a block from 10.0.1.20",
        ),
        (
            [pool(addresses="10.0.1.240/28")],
            {},
            "pools[0] (web): field 'addresses' is 10.0.1.240/28, which holds nodesSubnet's "
            "broadcast address 10.0.1.255",
        ),
        (
            [pool(addresses="10.0.1.64/28")],
            {"controlPlaneIp": "10.0.1.70"},
            "pools[0] (web): field 'addresses' is 10.0.1.64/28, which holds "
            "raya:controlPlaneIp 10.0.1.70",
        ),
        (
            [pool(addresses="10.0.0.0/28")],
            {"nodesSubnet": "10.0.0.0/24", "controlPlaneIp": "10.0.0.10"},
            "pools[0] (web): field 'addresses' is 10.0.0.0/28, which takes from the first 20 "
            "addresses of nodesSubnet (the control planes'); accepted: a block from 10.0.0.20",
        ),
        (
            [pool(), pool(name="db", addresses="10.0.1.64/26")],
            {},
            "pools[1] (db): field 'addresses' is 10.0.1.64/26, which overlaps pool web's "
            "10.0.1.64/28",
        ),
        (
            [pool(addresses="10.0.1.32/28")],
            {},
            "pools[0] (web): field 'addresses' is 10.0.1.32/28, which holds 10.0.1.32, an "
            "address of the agents list (agent-12)",
        ),
        (
            [pool(count=17)],
            {},
            "pools[0] (web): field 'count' is 17, but its addresses 10.0.1.64/28 hold at most 16",
        ),
    ],
)
def test_pools_that_do_not_fit_the_cluster(
    tmp_path: Path, pools: list[Any], stack: dict[str, Any], message: str
) -> None:
    fleet = load_fleet(write(tmp_path, {"agents": ["cx23"] * 13, "pools": pools}))
    with pytest.raises(ConfigError) as caught:
        build_cluster(config(**stack), fleet, "deploy/fleet/agents.json")
    assert str(caught.value) == f"deploy/fleet/agents.json: {message}"


def test_a_pool_fills_its_block_and_no_more(tmp_path: Path) -> None:
    fleet = load_fleet(write(tmp_path, {"pools": [pool(count=16), pool(name="db", count=0,
                                                                        addresses="10.0.1.80/28")]}))
    cluster = build_cluster(config(), fleet, "f")
    assert [str(n.private_ip) for n in cluster.agents][-1] == "10.0.1.79"
    assert len(cluster.agents) == 16


def test_sold_problem_names_the_field_that_chose_a_type_not_sold_or_not_offered() -> None:
    fleet = Fleet(("cx23", "cpx21"))
    cluster = build_cluster(config(location="hel1"), fleet, "agents.json")
    everywhere = ("ash", "fsn1", "hel1", "nbg1")
    sold = {"cx33": everywhere, "cx23": everywhere, "cpx21": ("ash", "fsn1")}
    problem = sold_problem(cluster, fleet, sold, fleet_source="agents.json", stack_source="s")
    assert problem == (
        "agents.json: agents[1] is 'cpx21', which Hetzner does not sell in hel1 "
        "(raya:location); it sells cpx21 in ash, fsn1; accepted: a type sold in hel1, or one "
        "of those locations"
    )
    offered = {"cx23": everywhere, "cpx21": everywhere}
    assert sold_problem(cluster, fleet, offered, fleet_source="f", stack_source="s") == (
        "s: raya:controlPlaneServerType is 'cx33', a server type Hetzner does not offer"
    )
    sold["cpx21"] = everywhere
    assert sold_problem(cluster, fleet, sold, fleet_source="f", stack_source="s") is None
