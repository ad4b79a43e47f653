"""The program with one, three and five control planes: each its own server, volume and
record, the API name holding all of them, spread placement groups, and with several a
private load balancer as the registration address; growing keeps what exists."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
import yaml

from raya.cloud.program import define
from raya.model.fleet import Cluster, build_cluster
from raya.model.pins import load_chart_pins, load_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.render import render_node
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import ProviderMocks, Run, reveal, run_program
from tests.cloud.program.test_program import CLUSTER_TOKEN, provider_mocks
from tests.support import REPO

PINS = load_pins(REPO)
RENDER = functools.partial(render_node, charts=load_chart_pins(REPO))
EXAMPLE = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
SERVER = "hcloud:index/server:Server"
VOLUME = "hcloud:index/volume:Volume"
GROUP = "hcloud:index/placementGroup:PlacementGroup"
BALANCER = "hcloud:index/loadBalancer:LoadBalancer"


def sized(count: int, agents: int = 3) -> Cluster:
    config = dataclasses.replace(EXAMPLE.config, control_planes=count)
    return build_cluster(config, ("cx23",) * agents, "test fleet")


def run(mocks: ProviderMocks, cluster: Cluster) -> Run:
    return run_program(mocks, lambda: define(cluster, PINS, RENDER, hcloud_token=CLUSTER_TOKEN))


def names(count: int) -> list[str]:
    return ["control-plane", *(f"control-plane-{k}" for k in range(1, count))]


@pytest.mark.parametrize("count", [1, 3, 5])
def test_each_control_plane_has_its_server_volume_and_record(count: int) -> None:
    result = run(provider_mocks(), sized(count))
    servers, volumes = result.of_type(SERVER), result.of_type(VOLUME)
    assert sorted(volumes) == sorted(f"{name}-state" for name in names(count))
    attachments = result.of_type("hcloud:index/volumeAttachment:VolumeAttachment")
    for k, name in enumerate(names(count)):
        server = reveal(servers[name].inputs)
        assert server["name"] == f"raya-{name}"
        assert server["networks"][0]["ip"] == f"10.0.1.{10 + k}"
        assert server["labels"]["role"] == "control-plane"
        assert reveal(volumes[f"{name}-state"].inputs)["name"] == f"raya-{name}-state"
        assert volumes[f"{name}-state"].options.protect
        assert reveal(attachments[f"{name}-volume"].inputs) == {
            "serverId": int(servers[name].id),
            "volumeId": int(volumes[f"{name}-state"].id),
            "automount": False,
        }
        # Its own volume's device is in its config, and no other's.
        text = reveal(servers[name].inputs["userData"])
        for other in names(count):
            device = f"scsi-0HC_Volume_{volumes[f'{other}-state'].id}"
            assert (device in text) == (other == name), (name, other)
        label = "cp" if k == 0 else f"cp{k}"
        record = reveal(result.resources[label].inputs)
        assert record["name"] == f"{label}.raya.example.com."
        # cp, the API's name, answers with every control plane; cp<k> with its own.
        holders = names(count) if k == 0 else [name]
        assert record["rrdatas"] == [servers[h].outputs["ipv4Address"] for h in holders]
    assert sorted(result.outputs["servers"]) == sorted([*names(count), "agent-0", "agent-1",
                                                         "agent-2"])  # fmt: skip


@pytest.mark.parametrize("count", [3, 5])
def test_several_control_planes_register_through_a_private_balancer(count: int) -> None:
    result = run(provider_mocks(), sized(count))
    (balancer,) = result.of_type(BALANCER).values()
    assert reveal(balancer.inputs) == {
        "name": "raya-registration",
        "loadBalancerType": "lb11",
        "location": "nbg1",
        "labels": {"managed_by": "raya"},
    }
    network = reveal(result.resources["registration-network"].inputs)
    assert network == {
        "loadBalancerId": int(balancer.id),
        "subnetId": result.resources["nodes"].id,
        "ip": "10.0.1.15",
        # Private only: no public address bypasses the firewall's raya:apiSources.
        "enablePublicInterface": False,
    }
    target = reveal(result.resources["registration-targets"].inputs)
    assert target == {
        "type": "label_selector",
        "loadBalancerId": int(balancer.id),
        "labelSelector": "managed_by=raya,role=control-plane",
        "usePrivateIp": True,
    }
    service = reveal(result.resources["registration-k3s"].inputs)
    assert (service["protocol"], service["listenPort"], service["destinationPort"]) == (
        "tcp", 6443, 6443,
    )  # fmt: skip
    assert service["healthCheck"]["protocol"] == "tcp" and service["healthCheck"]["port"] == 6443
    # Every control plane's label matches the selector; no agent's does.
    for name, server in result.of_type(SERVER).items():
        labels = reveal(server.inputs)["labels"]
        matches = labels["managed_by"] == "raya" and labels["role"] == "control-plane"
        assert matches == name.startswith("control-plane"), name
    # The joiners and the agents register there.
    for name, server in result.of_type(SERVER).items():
        config = yaml.safe_load(ignition_files(reveal(server.inputs["userData"]))[
            "/etc/rancher/k3s/config.yaml"])  # fmt: skip
        if name == "control-plane":
            assert config["cluster-init"] is True and "server" not in config
        else:
            assert config["server"] == "https://10.0.1.15:6443", name


def test_one_control_plane_has_no_balancer_and_registers_at_its_own_address() -> None:
    result = run(provider_mocks(), sized(1))
    assert result.of_type(BALANCER) == {}
    for server in result.of_type(SERVER).values():
        config = yaml.safe_load(
            ignition_files(reveal(server.inputs["userData"]))["/etc/rancher/k3s/config.yaml"]
        )
        assert config.get("server", "https://10.0.1.10:6443") == "https://10.0.1.10:6443"


def groups_of(result: Run) -> dict[str, str]:
    """Server name -> the name of its placement group."""
    by_id = {group.id: reveal(group.inputs)["name"] for group in result.of_type(GROUP).values()}
    found: dict[str, Any] = {}
    for name, server in result.of_type(SERVER).items():
        group_id = reveal(server.inputs).get("placementGroupId")
        if group_id is not None:
            found[name] = by_id[str(int(group_id))]  # numbers travel as floats
    return found


def test_spread_groups_hold_the_control_planes_and_the_first_ten_agents() -> None:
    result = run(provider_mocks(), sized(3, agents=12))
    assert {reveal(g.inputs)["type"] for g in result.of_type(GROUP).values()} == {"spread"}
    groups = groups_of(result)
    assert {name: groups[name] for name in names(3)} == dict.fromkeys(
        names(3), "raya-control-planes"
    )
    # Hetzner holds 10 servers in a spread group: agents 10 and 11 stay out of it.
    # (The mocks see the servers in the order their inputs resolve: compare as sets.)
    assert {name for name in groups if name.startswith("agent-")} == {
        f"agent-{i}" for i in range(10)
    }
    assert set(groups[f"agent-{i}"] for i in range(10)) == {"raya-agents"}
    # Existing servers never move: a server joins its group when created (or replaced).
    server = result.resources["control-plane"]
    assert "placementGroupId" in server.options.ignore_changes


def test_growing_from_one_to_three_replaces_nothing() -> None:
    mocks = provider_mocks()
    before = run(mocks, sized(1))
    after = run(mocks, sized(3))
    # The mocks re-create any resource whose inputs change but a server's; the Google
    # provider updates a record set's rrdatas in place (terraform-provider-google,
    # resource_dns_record_set.go: only managed_zone, name and type force a new one).
    assert mocks.replaced == ["cp"]
    old_cp, new_cp = (reveal(run.resources["cp"].inputs) for run in (before, after))
    assert {key for key in old_cp if old_cp[key] != new_cp[key]} == {"rrdatas"}
    added = set(after.resources) - set(before.resources)
    assert added == {
        "control-plane-1", "control-plane-2", "control-plane-1-state", "control-plane-2-state",
        "control-plane-1-volume", "control-plane-2-volume", "control-plane-1-host-key",
        "control-plane-2-host-key", "cp1", "cp2", "control-planes", "registration",
        "registration-network", "registration-targets", "registration-k3s",
    }  # fmt: skip
    assert set(before.resources) <= set(after.resources)
    for name in ("control-plane", "control-plane-state", "join-secret", "server-ca"):
        assert after.resources[name].id == before.resources[name].id, name
    # The first's config is the same; the agents now register through the balancer, which
    # their running config does not say: drift, reported, applied by a roll when wanted.
    assert reveal(after.resources["control-plane"].inputs)["userData"] == reveal(
        before.resources["control-plane"].inputs
    )["userData"]
    assert sorted(after.outputs["drift"]) == ["agent-0", "agent-1", "agent-2"]
