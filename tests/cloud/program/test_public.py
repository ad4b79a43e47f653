"""The public mode (`raya:network: public`) under the program's mocks: no Hetzner network, a
primary IP per node and the ingress load balancer made before any server, firewalls that
admit between nodes exactly what the mode needs, within Hetzner's limits, and node configs
for flannel's WireGuard backend."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from raya.cloud.program.firewall import Peer, firewall_layout
from raya.cloud.program.placement import spread_groups
from raya.errors import DeployError
from raya.model.config import parse_stack_config
from raya.model.fleet import Cluster, build_cluster, load_fleet
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import Run, reveal
from tests.cloud.program.test_program import EXAMPLE, SERVER, provider_mocks, run

FIREWALL = "hcloud:index/firewall:Firewall"
PRIMARY_IP = "hcloud:index/primaryIp:PrimaryIp"
LOAD_BALANCER = "hcloud:index/loadBalancer:LoadBalancer"
# kube-apiserver's default --service-node-port-range, which k3s keeps.
NODE_PORTS = ("tcp", "30000-32767")
K3S_CONFIG = "/etc/rancher/k3s/config.yaml"
METADATA_SCRIPT = "/usr/local/bin/raya-node-metadata"
PRIVATE_KEYFILE = "/etc/NetworkManager/system-connections/enp7s0.nmconnection"
GUARD = "/etc/nftables/raya-metadata-guard.nft"
ANYWHERE = {"0.0.0.0/0", "::/0"}
# Two API sources as the default has, but narrow: the nodes must be listed beside them.
NARROW: dict[str, Any] = {"apiSources": ["203.0.113.0/24", "2001:db8::/32"]}
# Hetzner's limits, as its docs state them (the Firewalls FAQ; the API's set_rules; the
# Placement groups page), written here as figures, not read from the code.
FIREWALLS_PER_SERVER = 5
ENTRIES_PER_FIREWALL = 50
EFFECTIVE_PER_FIREWALL = 500
SOURCES_PER_ENTRY = 100


def stack(**changes: Any) -> Any:
    return parse_stack_config(
        {
            "authorizedUsers": ["octo-alice"],
            "managedSubdomain": "raya",
            "parentZone": "example.com",
            "acmeEmail": "ops@example.org",
            "nodesSubnet": "10.0.0.0/20",
            "controlPlaneIp": "10.0.0.10",
            "network": "public",
            **changes,
        },
        "Pulumi.large.yaml",
    )


def pools(tmp_path: Path, *counts: int) -> Any:
    """Pools p0, p1, ... of `counts` nodes, each in its own /23 from 10.0.2.0."""
    path = tmp_path / "agents.json"
    block = ipaddress.IPv4Network("10.0.2.0/23")
    entries = []
    for k, count in enumerate(counts):
        net = ipaddress.IPv4Network((int(block.network_address) + k * 512, 23))
        entries.append({"name": f"p{k}", "type": "cx23", "count": count, "addresses": str(net)})
    path.write_text(json.dumps({"pools": entries}))
    return load_fleet(path)


def large(tmp_path: Path, *counts: int, control_planes: int = 3, **changes: Any) -> Cluster:
    config = stack(controlPlanes=control_planes, **changes)
    return build_cluster(config, pools(tmp_path, *counts), "agents.json")


def firewall_rules(result: Run) -> dict[str, list[dict[str, Any]]]:
    return {
        name: reveal(resource.inputs)["rules"]
        for name, resource in result.of_type(FIREWALL).items()
    }


def admitted(result: Run) -> dict[tuple[str, str | None], set[str]]:
    """(protocol, port) -> every source any firewall admits it from."""
    found: dict[tuple[str, str | None], set[str]] = {}
    for rules in firewall_rules(result).values():
        for rule in rules:
            assert rule["direction"] == "in"
            found.setdefault((rule["protocol"], rule.get("port")), set()).update(rule["sourceIps"])
    return found


def addresses(result: Run) -> dict[str, str]:
    """Each node's public IPv4 address, as its server has it."""
    return {
        name: reveal(server.outputs)["ipv4Address"]
        for name, server in result.of_type(SERVER).items()
    }


def test_the_list_form_in_the_public_mode(tmp_path: Path) -> None:
    """The list form's agents (no pool) get their primary IPs and firewall places too."""
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": ["cx23", "cx33"]}))
    cluster = build_cluster(stack(), load_fleet(path), "agents.json")
    result = run(provider_mocks(), cluster)
    assert sorted(result.of_type(PRIMARY_IP)) == [
        "agent-0-ipv4", "agent-1-ipv4", "control-plane-ipv4",
    ]  # fmt: skip
    assert not result.of_type("hcloud:index/network:Network")
    # WireGuard between the nodes: every node's address, the list form's agents included.
    wireguard = admitted(result)[("udp", "51820")]
    assert {f"{ip}/32" for ip in addresses(result).values()} == wireguard


def test_nodes_get_a_primary_ip_each_and_no_network(tmp_path: Path) -> None:
    cluster = large(tmp_path, 3, 2)
    result = run(provider_mocks(), cluster)
    types = {resource.typ for resource in result.resources.values()}
    assert not types & {"hcloud:index/network:Network", "hcloud:index/networkSubnet:NetworkSubnet"}
    # No registration balancer (it lives on the network): the ingress' alone.
    assert sorted(result.of_type(LOAD_BALANCER)) == ["ingress"]
    ips = result.of_type(PRIMARY_IP)
    # What `raya status` compares the API servers' endpoints with: the public address.
    outputs = result.outputs["servers"]
    assert {name: entry["nodeIp"] for name, entry in outputs.items()} == addresses(result)
    assert sorted(ips) == sorted(f"{node.name}-ipv4" for node in cluster.nodes)
    for name, server in result.of_type(SERVER).items():
        inputs = reveal(server.inputs)
        assert "networks" not in inputs or not inputs["networks"], name
        ip = ips[f"{name}-ipv4"]
        assert inputs["publicNets"] == [
            {"ipv4Enabled": True, "ipv4": int(ip.id), "ipv6Enabled": True}
        ]
        # The server's address is its primary IP's, known before the server existed.
        assert reveal(server.outputs)["ipv4Address"] == reveal(ip.outputs)["ipAddress"]
        ip_inputs = reveal(ip.inputs)
        assert ip_inputs["autoDelete"] is False  # a replaced server takes the same address
        # A control plane's etcd member is known by its address: kept like its volume.
        assert result.resources[f"{name}-ipv4"].options.protect == name.startswith("control")


def test_the_names_resolve_before_the_servers_exist(tmp_path: Path) -> None:
    # Agents register through `cp.<zone>`: its records are made from the primary IPs, not
    # after the servers, so no node asks a name that does not exist yet (an answer a
    # resolver keeps for the zone's negative TTL).
    cluster = large(tmp_path, 2)
    mocks = provider_mocks()
    result = run(mocks, cluster)
    ips = {name.removesuffix("-ipv4"): reveal(ip.outputs)["ipAddress"]
           for name, ip in result.of_type(PRIMARY_IP).items()}  # fmt: skip
    records = result.of_type("gcp:dns/recordSet:RecordSet")
    assert reveal(records["cp"].inputs)["rrdatas"] == [
        ips[node.name] for node in cluster.control_planes
    ]
    assert reveal(records["p0-1-record"].inputs)["rrdatas"] == [ips["p0-1"]]
    for name in records:
        assert not any("Server::" in urn for urn in mocks.dependencies[name]), name


def ingress_address(result: Run) -> str:
    return f"{reveal(result.of_type(LOAD_BALANCER)['ingress'].outputs)['ipv4']}/32"


def test_the_ingress_balancer_is_made_first_and_left_to_the_cloud_controller(
    tmp_path: Path,
) -> None:
    cluster = large(tmp_path, 2)
    mocks = provider_mocks()
    result = run(mocks, cluster)
    balancer = result.of_type(LOAD_BALANCER)["ingress"]
    inputs = reveal(balancer.inputs)
    # What Traefik's Service annotates (`load-balancer.hetzner.cloud/name`, `type`,
    # `location`): the cloud controller finds it by that name and takes it over.
    assert (inputs["name"], inputs["loadBalancerType"], inputs["location"]) == (
        "raya-ingress",
        "lb11",
        cluster.config.location,
    )
    assert inputs["labels"] == {"managed_by": "raya"}
    # What the controller changes on a balancer it takes (v1.35.0, `ReconcileHCLB`) is not
    # Pulumi's: its label, name, algorithm, type, targets.
    assert set(balancer.options.ignore_changes) == {
        'labels["hcloud-ccm/service-uid"]',
        "name",
        "algorithm",
        "loadBalancerType",
        "targets",
    }
    # The firewall admitting the NodePorts waits for its address and the servers for the
    # firewalls: it exists before any server, and `raya destroy` deletes it after them.
    assert any(urn.endswith("::ingress") for urn in mocks.dependencies["firewall"])
    for name in result.of_type(SERVER):
        assert any(urn.endswith("::firewall") for urn in mocks.dependencies[name]), name
    # The controller took it: its label added, its type changed by a Service annotation, as
    # a refresh records them; the next `raya up` neither replaces nor reverts it.
    key = (LOAD_BALANCER, "ingress")
    stored = mocks.state[key]
    taken = json.loads(stored.inputs)
    taken["labels"]["hcloud-ccm/service-uid"] = "0f6b7a0e-uid"
    taken["loadBalancerType"] = "lb21"
    mocks.state[key] = replace(stored, inputs=json.dumps(taken, sort_keys=True))
    mocks.replaced.clear()
    again = run(mocks, cluster)
    assert "ingress" not in mocks.replaced
    assert ingress_address(again) == ingress_address(result)


def test_the_users_balancers_are_made_first_and_admitted_to_the_nodeports(
    tmp_path: Path,
) -> None:
    mqtt = {"name": "mqtt", "type": "lb21"}
    db = {"name": "db", "location": "fsn1"}
    mocks = provider_mocks()
    result = run(mocks, large(tmp_path, 2, loadBalancers=[mqtt, db]))
    balancers = result.of_type(LOAD_BALANCER)
    assert sorted(balancers) == ["db-balancer", "ingress", "mqtt-balancer"]
    made = {
        name: (inputs["name"], inputs["loadBalancerType"], inputs["location"], inputs["labels"])
        for name, inputs in ((name, reveal(b.inputs)) for name, b in balancers.items())
    }
    # The names a Service's `load-balancer.hetzner.cloud/name` gives; lb11 and the cluster's
    # location unless the setting says otherwise.
    assert made["mqtt-balancer"] == ("raya-mqtt", "lb21", "nbg1", {"managed_by": "raya"})
    assert made["db-balancer"] == ("raya-db", "lb11", "fsn1", {"managed_by": "raya"})
    for name in ("mqtt-balancer", "db-balancer"):
        # Left to the cloud controller once it takes it, as Traefik's is.
        assert set(balancers[name].options.ignore_changes) == {
            'labels["hcloud-ccm/service-uid"]', "name", "algorithm", "loadBalancerType",
            "targets",
        }  # fmt: skip
        # Made before the firewall that admits it, and so before every server.
        assert any(urn.endswith(f"::{name}") for urn in mocks.dependencies["firewall"])
    ipv4 = {f"{reveal(b.outputs)['ipv4']}/32" for b in balancers.values()}
    assert len(ipv4) == 3
    # The NodePorts from the three balancers' addresses, nothing else.
    assert admitted(result)[NODE_PORTS] == ipv4
    # One taken out of the setting: its address is no longer admitted.
    fewer = run(mocks, large(tmp_path, 2, loadBalancers=[db]))
    assert sorted(fewer.of_type(LOAD_BALANCER)) == ["db-balancer", "ingress"]
    assert admitted(fewer)[NODE_PORTS] == ipv4 - {
        f"{reveal(balancers['mqtt-balancer'].outputs)['ipv4']}/32"
    }


def test_the_private_mode_declares_no_ingress_balancer() -> None:
    # There the cloud controller makes it, on the network, and the firewalls need not know it.
    result = run(provider_mocks())
    assert result.of_type(LOAD_BALANCER) == {}  # one control plane: no registration balancer
    assert NODE_PORTS not in admitted(result)


def test_the_firewalls_admit_between_nodes_only_what_each_role_needs(tmp_path: Path) -> None:
    cluster = large(tmp_path, 3, 2, apiSources=["203.0.113.7/32"], sshSources=[])
    result = run(provider_mocks(), cluster)
    ip = {name: f"{address}/32" for name, address in addresses(result).items()}
    nodes = set(ip.values())
    control_planes = {ip[node.name] for node in cluster.control_planes}
    assert len(nodes) == 8 and len(control_planes) == 3
    assert admitted(result) == {
        # Pod traffic: flannel's wireguard-native (IPv4) between every pair of nodes.
        ("udp", "51820"): nodes,
        # The API and the supervisor (registration, the agents' load balancer): the
        # operators' sources and every node.
        ("tcp", "6443"): {"203.0.113.7/32"} | nodes,
        # The API server reaching kubelets (logs, exec), and etcd's members each other.
        ("tcp", "10250"): control_planes,
        ("tcp", "2379-2380"): control_planes,
        # The ingress balancer reaching Traefik's NodePorts on its targets: from it alone.
        NODE_PORTS: {ingress_address(result)},
        # As in the private mode: the ingress and ICMP from anywhere; SSH closed (no source).
        ("tcp", "80"): ANYWHERE,
        ("tcp", "443"): ANYWHERE,
        ("icmp", None): ANYWHERE,
    }
    for firewall in result.of_type(FIREWALL).values():
        assert reveal(firewall.inputs)["applyTos"] == [{"labelSelector": "managed_by=raya"}]


def test_one_control_plane_has_no_etcd_peers_to_admit(tmp_path: Path) -> None:
    cluster = large(tmp_path, 2, control_planes=1)
    opened = admitted(run(provider_mocks(), cluster))
    assert ("tcp", "2379-2380") not in opened
    assert len(opened[("tcp", "10250")]) == 1


def test_servers_wait_for_every_firewall(tmp_path: Path) -> None:
    # The public mode always has Hetzner's five, whatever its size: a node's firewall is
    # never one that another node's arrival creates.
    cluster = large(tmp_path, 2, **NARROW)
    mocks = provider_mocks()
    result = run(mocks, cluster)
    firewalls = result.of_type(FIREWALL)
    names = {resource: reveal(f.inputs)["name"] for resource, f in firewalls.items()}
    assert names == {
        "firewall": "raya",
        "firewall-2": "raya-2",
        "firewall-3": "raya-3",
        "firewall-4": "raya-4",
        "firewall-5": "raya-5",
    }
    for name in result.of_type(SERVER):
        waits = {urn.rsplit("::", 1)[1] for urn in mocks.dependencies[name]}
        assert set(names) <= waits, name


def limits_kept(layout: Any) -> list[int]:
    """Each firewall's effective rules, after checking every Hetzner limit on `layout`."""
    weights = [sum(len(rule.sources) for rule in rules) for rules in layout]
    assert len(layout) <= FIREWALLS_PER_SERVER
    assert all(weight <= EFFECTIVE_PER_FIREWALL for weight in weights)
    assert all(len(rules) <= ENTRIES_PER_FIREWALL for rules in layout)
    assert all(len(rule.sources) <= SOURCES_PER_ENTRY for rules in layout for rule in rules)
    return weights


def test_a_thousand_agents_fit_hetzners_firewall_limits(tmp_path: Path) -> None:
    # 5 control planes and 1,000 agents: 1,005 addresses for WireGuard and for the API, 5
    # control planes for the kubelet and for etcd, 2 SSH, 2 API, 4 web, 2 ICMP sources, the
    # ingress balancer for the NodePorts: 2 x 1,005 + 2 x 5 + 11 = 2,031 effective rules,
    # one per source address.
    cluster = large(tmp_path, 500, 500, control_planes=5, **NARROW)
    layout = firewall_layout(cluster)
    weights = limits_kept(layout)
    assert sum(weights) == 2031
    # Each firewall holds the nodes whose planned address is its number modulo 5: one
    # control plane (4 rules: WireGuard, API, kubelet, etcd) and 100 nodes of each pool (2
    # rules each); the first also the 11 sources of the settings and the balancer.
    assert weights == [415, 404, 404, 404, 404]
    # Every node's address in the WireGuard and API rules once, whatever firewall holds it.
    for port in ("51820", "6443"):
        held = [s for rules in layout for rule in rules if rule.port == port for s in rule.sources]
        assert len(held) == len(set(held))
        assert {getattr(s, "name", None) for s in held} >= {n.name for n in cluster.nodes}


def test_with_the_api_open_to_anywhere_the_nodes_are_not_listed_again(tmp_path: Path) -> None:
    # raya:apiSources' default holds 0.0.0.0/0, which every node's address is in: 1,005
    # WireGuard sources, 5 + 5 for the kubelet and etcd, 11 others: 1,026.
    cluster = large(tmp_path, 500, 500, control_planes=5)
    layout = firewall_layout(cluster)
    assert limits_kept(layout) == [214, 203, 203, 203, 203]
    api = {s for rules in layout for rule in rules if rule.port == "6443" for s in rule.sources}
    assert api == ANYWHERE
    opened = admitted(run(provider_mocks(), large(tmp_path, 2)))
    assert opened[("tcp", "6443")] == ANYWHERE
    assert len(opened[("udp", "51820")]) == 5  # still only from the nodes


def test_past_a_full_firewall_the_fleet_is_refused_before_anything_is_declared(
    tmp_path: Path,
) -> None:
    # Pools p0, p1, p2 start at offsets 512, 1024 and 1536 of nodesSubnet 10.0.0.0/20 (2, 4
    # and 1 modulo 5), the control planes at 10 to 14. The first firewall holds the 11
    # sources of the settings and the balancer, control-plane (4 rules), and 2 rules for
    # each pool node at an address 0 modulo 5: p0's 100, p1's 100 and, of p2's 214 nodes,
    # the 43 of i = 4, 9, ... 214: 11 + 4 + 2 x 242 = 499 with 214 nodes in p2 (1,219
    # nodes); p2-214 is the 243rd: 501.
    fits = large(tmp_path, 500, 500, 214, control_planes=5, **NARROW)
    assert len(fits.nodes) == 1219
    assert limits_kept(firewall_layout(fits))[0] == 499
    over = large(tmp_path, 500, 500, 215, control_planes=5, **NARROW)
    mocks = provider_mocks()
    with pytest.raises(DeployError) as refused:
        run(mocks, over)
    assert str(refused.value).startswith(
        "deploy/fleet/agents.json: 1220 nodes need 2461 effective firewall rules"
    )
    assert (
        "501 effective rules in 14 entries in firewall raya (the one holding the 244 nodes "
        "whose planned address is 0 modulo 5, and the sources of the stack's settings), but "
        "Hetzner holds 500 effective rules and 50 entries in a firewall"
    ) in str(refused.value)
    assert mocks.resources == {}  # nothing declared


def homes(layout: Any) -> dict[str, set[int]]:
    """Each node -> the firewalls (by position) whose rules list its address."""
    found: dict[str, set[int]] = {}
    for k, rules in enumerate(layout):
        for rule in rules:
            for source in rule.sources:
                if isinstance(source, Peer):
                    found.setdefault(source.name, set()).add(k)
    return found


def test_no_nodes_address_changes_firewall_as_the_fleet_grows_and_shrinks(
    tmp_path: Path,
) -> None:
    # Pulumi updates the firewalls independently: an address leaving one firewall for
    # another could be missing from both between the two updates. Through a fleet's life,
    # every node's address stays in the one firewall it started in. Large enough for the
    # addresses to span every firewall many times over (narrow apiSources: 2 rules a node).
    path = tmp_path / "agents.json"

    def fleet(agents: int, counts: tuple[int, ...], control_planes: int) -> Cluster:
        # The list form's agents and pools p0, p1, ... each in its own /23 from 10.0.2.0.
        entries = [
            {"name": f"p{k}", "type": "cx23", "count": count,
             "addresses": f"10.0.{2 + 2 * k}.0/23"}
            for k, count in enumerate(counts) if count
        ]  # fmt: skip
        path.write_text(json.dumps({"agents": ["cx23"] * agents, "pools": entries}))
        config = stack(controlPlanes=control_planes, **NARROW)
        return build_cluster(config, load_fleet(path), "agents.json")

    steps = [
        ("start", fleet(2, (400, 300, 200), 3)),
        ("a middle pool grows", fleet(2, (400, 370, 200), 3)),
        ("the last pool grows", fleet(2, (400, 370, 260), 3)),
        ("a pool added at the end", fleet(2, (400, 370, 260, 40), 3)),
        ("two control planes added", fleet(2, (400, 370, 260, 40), 5)),
        ("the list form grows", fleet(5, (400, 370, 260, 40), 5)),
        ("a middle pool shrinks", fleet(5, (400, 230, 260, 40), 5)),
        ("the first pool shrinks", fleet(5, (150, 230, 260, 40), 5)),
        ("a middle pool removed", fleet(5, (150, 0, 260, 40), 5)),
        ("the list form shrinks", fleet(1, (150, 0, 260, 40), 5)),
    ]
    before = homes(firewall_layout(steps[0][1]))
    assert {len(held) for held in before.values()} == {1}  # every address in one firewall
    for what, cluster in steps[1:]:
        layout = firewall_layout(cluster)
        limits_kept(layout)
        after = homes(layout)
        assert set(after) == {node.name for node in cluster.nodes}, what
        assert {len(held) for held in after.values()} == {1}, what
        moved = sorted(name for name in set(before) & set(after) if before[name] != after[name])
        assert moved == [], what
        before = after


def test_each_nodes_address_is_in_the_firewall_of_its_planned_address(tmp_path: Path) -> None:
    # 10.0.0.0/20: the control planes at offsets 10, 11, 12 (0, 1, 2 modulo 5); pool p0 at
    # 10.0.2.0/23, offset 512 (2 modulo 5): p0-0 2, p0-1 3, p0-2 4, p0-3 0.
    expected = {
        "control-plane": "firewall",
        "control-plane-1": "firewall-2",
        "control-plane-2": "firewall-3",
        "p0-0": "firewall-3",
        "p0-1": "firewall-4",
        "p0-2": "firewall-5",
        "p0-3": "firewall",
    }
    mocks = provider_mocks()
    for count in (4, 3):  # and once p0-3 has left: no other address moves
        result = run(mocks, large(tmp_path, count, **NARROW))
        ip = {f"{address}/32": name for name, address in addresses(result).items()}
        held: dict[str, set[str]] = {}
        for firewall, rules in firewall_rules(result).items():
            for rule in rules:
                for source in rule["sourceIps"]:
                    if source in ip:
                        held.setdefault(ip[source], set()).add(firewall)
        assert held == {
            name: {firewall} for name, firewall in expected.items() if name in ip.values()
        }, count


def test_placement_groups_past_hetzners_50_are_refused(tmp_path: Path) -> None:
    # Hetzner's docs, "Placement groups": up to 50 in a project. The control planes' group
    # and one per pool with nodes: 3 control planes and 49 pools are 50.
    path = tmp_path / "agents.json"

    def fleet(count: int) -> Cluster:
        # One /28 each, from 10.0.2.0.
        entries = [
            {"name": f"p{k}", "type": "cx23", "count": 1,
             "addresses": f"10.0.{2 + k // 16}.{k % 16 * 16}/28"}
            for k in range(count)
        ]  # fmt: skip
        path.write_text(json.dumps({"pools": entries}))
        return build_cluster(stack(controlPlanes=3), load_fleet(path), "agents.json")

    assert len(spread_groups(fleet(49))) == 50
    with pytest.raises(DeployError) as refused:
        spread_groups(fleet(50))
    assert str(refused.value) == (
        "deploy/fleet/agents.json: pools: the cluster needs 51 spread placement groups (one "
        "per pool with nodes, one for the control planes when there are several, one for the "
        "list form's agents), but Hetzner holds at most 50 in a project (Hetzner's docs, "
        '"Placement groups"), other stacks\' included; accepted: at most 49 pools with nodes'
    )
    mocks = provider_mocks()
    with pytest.raises(DeployError):
        run(mocks, fleet(50))
    assert mocks.resources == {}


def test_node_configs_use_wireguard_over_the_public_addresses(tmp_path: Path) -> None:
    cluster = large(tmp_path, 2)
    result = run(provider_mocks(), cluster)
    files = {
        name: ignition_files(reveal(server.inputs)["userData"])
        for name, server in result.of_type(SERVER).items()
    }
    api = "https://cp.raya.example.com:6443"
    for name, node_files in files.items():
        config = yaml.safe_load(node_files[K3S_CONFIG])
        # No private network to wait for or to name: k3s takes the public address.
        assert PRIVATE_KEYFILE not in node_files, name
        assert not {"node-ip", "flannel-iface", "advertise-address"} & set(config), name
        script = node_files[METADATA_SCRIPT].decode()
        assert "printf 'node-ip: \"%s\"\\n' \"$address\" > \"$dropin.tmp\"" in script
        assert '"$address" "$server" >> "$dropin.tmp"' in script
        # Every other protection kept: pods stay away from the metadata service.
        assert "ip daddr 169.254.169.254 counter drop" in node_files[GUARD].decode()
        if name == "control-plane":
            assert config["flannel-backend"] == "wireguard-native"
            assert config["cluster-init"] is True
            assert "10.0.0.15" not in config["tls-san"]  # no private balancer to name
        else:
            assert config["server"] == api, name  # the API's name: every control plane
            assert "flannel-backend" not in config or name.startswith("control-plane-")
    # The cloud controller without a network (none to name in its Secret), and load
    # balancers reaching their targets by their public addresses.
    manifests = "/var/lib/raya/k3s-server-seed/manifests"
    secret = yaml.safe_load(files["control-plane"][f"{manifests}/raya-hcloud-credentials.yaml"])
    assert set(secret["stringData"]) == {"token"}
    charts = list(yaml.safe_load_all(files["control-plane"][f"{manifests}/raya-helm-charts.yaml"]))
    (ccm,) = [c for c in charts if c and "cloud-controller" in c["metadata"]["name"]]
    values = yaml.safe_load(ccm["spec"]["valuesContent"])
    assert values["networking"] == {"enabled": False}
    assert values["env"]["HCLOUD_LOAD_BALANCERS_USE_PRIVATE_IP"] == {"value": "false"}
    # The first control plane's datastore guard asks its peers by name: they have no private
    # address to be reached at.
    units = json.loads(reveal(result.of_type(SERVER)["control-plane"].inputs)["userData"])
    k3s = next(unit for unit in units["systemd"]["units"] if unit["name"] == "k3s.service")
    peers = "cp1.raya.example.com cp2.raya.example.com cp3.raya.example.com cp4.raya.example.com"
    assert peers in k3s["contents"]


def test_the_private_mode_keeps_one_network_and_one_firewall() -> None:
    result = run(provider_mocks())
    assert sorted(result.of_type(FIREWALL)) == ["firewall"]
    assert result.of_type(PRIMARY_IP) == {}
    assert "network" in result.resources and not EXAMPLE.config.public
