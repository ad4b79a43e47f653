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
from raya.model.fleet import Node, build_cluster, fleet_file, load_fleet, node_password
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, find_root, load_cluster
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
    full = build_cluster(config(), ("cx23",) * 235, "agents.json")
    assert str(full.agents[-1].private_ip) == "10.0.1.254"
    assert full.agents[-1].name == "agent-234"
    with pytest.raises(ConfigError) as caught:
        build_cluster(config(), ("cx23",) * 236, "deploy/fleet/agents.json")
    assert str(caught.value) == (
        "deploy/fleet/agents.json: 236 agents, but nodesSubnet 10.0.1.0/24 addresses at most "
        "235 from 10.0.1.20"
    )


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
    assert load_fleet(write(tmp_path, {"agents": ["cx23", "cx33"]})) == ("cx23", "cx33")
    assert load_fleet(write(tmp_path, {"agents": []})) == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "fleet file not found"),
        ("{", "not JSON: "),
        (["cx23"], 'expected {"agents": ["cx23", ...]}'),
        ({}, 'expected {"agents": ["cx23", ...]}'),
        ({"agents": "cx23"}, "'agents' must be a list of Hetzner server types"),
        (
            {"agents": [], "nodes": [], "comment": "x"},
            "unknown top-level key(s) comment, nodes; accepted: agents",
        ),
        ({"agents": ["cx23", ""]}, "agents[1] is ''; accepted: a Hetzner server type such as cx23"),
        ({"agents": ["cx23", None]}, "agents[1] is None; accepted: a Hetzner server type"),
        ({"agents": [23]}, "agents[0] is 23; accepted: a Hetzner server type"),
        ({"agents": ["cx-23"]}, "agents[0] is 'cx-23'; accepted: a Hetzner server type"),
        ({"agents": [" cx23"]}, "agents[0] is ' cx23'; accepted: a Hetzner server type"),
        ({"agents": ["CX23"]}, "agents[0] is 'CX23'; accepted: a Hetzner server type"),
        (
            {"agents": ["cx23", "cax11"]},
            "agents[1] is 'cax11', an ARM type; accepted: an x86 type, the image is x86 only",
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
