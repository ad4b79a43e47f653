"""The program on a mixed fleet (an agent of the list, an x86 pool with labels and taints, an
ARM pool in another location): each node's snapshot by architecture, location, address,
record and placement group; pools grown, added and removed without touching who stays."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from raya.errors import DeployError
from raya.model.fleet import Cluster, Fleet, Pool, build_cluster, load_fleet
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import reveal
from tests.cloud.program.test_program import EXAMPLE, SERVER, provider_mocks, run, user_data
from tests.pool_change import ADDRESSES_AFTER, ADDRESSES_BEFORE, AFTER, BEFORE, STAYING

GROUP = "hcloud:index/placementGroup:PlacementGroup"
RECORD = "gcp:dns/recordSet:RecordSet"
# provider_mocks' snapshots for the pins: 42 the newest available x86, 43 the ARM one.
X86_IMAGE, ARM_IMAGE = "42", "43"


def pool(name: str, server_type: str, count: int, block: str, **more: Any) -> Pool:
    return Pool(name, server_type, count, ipaddress.IPv4Network(block), **more)


WEB = pool(
    "web",
    "cx33",
    2,
    "10.0.1.64/28",
    labels=(("tier", "web"),),
    taints=("dedicated=web:NoSchedule",),
)
ARM = pool("arm", "cax21", 12, "10.0.1.128/27", location="fsn1")


def fleet(*pools: Pool) -> Cluster:
    return build_cluster(EXAMPLE.config, Fleet(agents=("cx23",), pools=pools), "test fleet")


def test_each_node_boots_its_architectures_snapshot_in_its_location() -> None:
    result = run(provider_mocks(), fleet(WEB, ARM))
    lookups = [args for token, args in result.calls if token.endswith("getImages")]
    assert sorted(tuple(args["withArchitectures"]) for args in lookups) == [("arm",), ("x86",)]
    servers = {name: reveal(r.inputs) for name, r in result.of_type(SERVER).items()}
    table = {
        name: (s["image"], s["location"], s["serverType"], s["networks"][0]["ip"])
        for name, s in servers.items()
    }
    assert table == {
        "control-plane": (X86_IMAGE, "nbg1", "cx33", "10.0.1.10"),
        "agent-0": (X86_IMAGE, "nbg1", "cx23", "10.0.1.20"),
        "web-0": (X86_IMAGE, "nbg1", "cx33", "10.0.1.64"),
        "web-1": (X86_IMAGE, "nbg1", "cx33", "10.0.1.65"),
        **{
            f"arm-{i}": (ARM_IMAGE, "fsn1", "cax21", f"10.0.1.{128 + i}")
            for i in range(12)
        },
    }
    records = {name: reveal(r.inputs) for name, r in result.of_type(RECORD).items()}
    assert records["web-1-record"]["name"] == "web-1.raya.example.com."
    arm_11 = result.resources["arm-11"].outputs["ipv4Address"]
    assert records["arm-11-record"]["rrdatas"] == [arm_11]

    k3s = {
        name: yaml.safe_load(ignition_files(text)["/etc/rancher/k3s/config.yaml"])
        for name, text in user_data(result).items()
    }
    assert (k3s["web-0"]["node-label"], k3s["web-0"]["node-taint"]) == (
        ["tier=web"],
        ["dedicated=web:NoSchedule"],
    )
    assert "node-label" not in k3s["arm-3"] and "node-label" not in k3s["agent-0"]
    assert k3s["arm-3"]["node-ip"] == "10.0.1.131"


def test_each_pool_is_spread_over_hosts_for_its_first_ten_nodes() -> None:
    """Hetzner's placement groups docs: a spread group holds at most 10 servers."""
    result = run(provider_mocks(), fleet(WEB, ARM))
    groups = {name: reveal(r.inputs) for name, r in result.of_type(GROUP).items()}
    assert groups == {
        "pool-web": {
            "name": "raya-web",
            "type": "spread",
            "labels": {"managed_by": "raya", "pool": "web"},
        },
        "pool-arm": {
            "name": "raya-arm",
            "type": "spread",
            "labels": {"managed_by": "raya", "pool": "arm"},
        },
    }
    placed = {
        name: reveal(r.inputs).get("placementGroupId")
        for name, r in result.of_type(SERVER).items()
    }
    arm, web = (int(result.resources[g].id) for g in ("pool-arm", "pool-web"))
    assert placed == {
        "control-plane": None,
        "agent-0": None,
        "web-0": web,
        "web-1": web,
        **{f"arm-{i}": arm if i < 10 else None for i in range(12)},
    }


def test_growing_adding_and_removing_pools_changes_no_server_that_stays(tmp_path: Path) -> None:
    def cluster(fleet_file: dict[str, Any]) -> Cluster:
        path = tmp_path / "agents.json"
        path.write_text(json.dumps(fleet_file))
        return build_cluster(EXAMPLE.config, load_fleet(path), "test fleet")

    def addresses(result: Any) -> dict[str, str]:
        servers = result.of_type(SERVER).items()
        return {name: reveal(r.inputs)["networks"][0]["ip"] for name, r in servers}

    mocks = provider_mocks()
    before = run(mocks, cluster(BEFORE))
    after = run(mocks, cluster(AFTER))
    assert addresses(before) == ADDRESSES_BEFORE
    assert addresses(after) == ADDRESSES_AFTER
    stayed = set(before.of_type(SERVER)) & set(after.of_type(SERVER))
    assert stayed == STAYING
    for name in stayed:
        assert reveal(after.resources[name].inputs) == reveal(before.resources[name].inputs)
        assert after.resources[name].id == before.resources[name].id, name
    assert mocks.replaced == []
    gone = set(before.resources) - set(after.resources)
    assert gone == {
        *(f"batch-{i}{part}" for i in (0, 1) for part in ("", "-host-key", "-record")),
        "pool-batch",
    }


def test_a_missing_arm_snapshot_says_to_build_it() -> None:
    mocks = provider_mocks()
    mocks.snapshots = [s for s in mocks.snapshots if s.architecture == "x86"]
    with pytest.raises(DeployError, match=r"no available arm snapshot .* run `raya image build`"):
        run(mocks, fleet(ARM))
    assert mocks.resources == {}
    run(mocks, fleet(WEB))  # an x86 fleet needs none


def test_an_autoscaled_pool_has_its_own_subnet_and_no_server() -> None:
    burst = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"),
                 min_size=0, max_size=4)  # fmt: skip
    mocks = provider_mocks()
    result = run(mocks, fleet(WEB, burst), autoscaler_token="autoscalerToken0" * 4)
    subnets = {
        name: reveal(r.inputs)
        for name, r in result.of_type("hcloud:index/networkSubnet:NetworkSubnet").items()
    }
    network_id = int(result.resources["network"].id)
    assert {name: (s["ipRange"], s["type"], s["networkZone"], s["networkId"])
            for name, s in subnets.items()} == {
        "nodes": ("10.0.1.0/24", "cloud", "eu-central", network_id),
        "load-balancers": ("10.0.2.0/24", "cloud", "eu-central", network_id),
        "burst-subnet": ("10.0.16.0/24", "cloud", "eu-central", network_id),
    }  # fmt: skip
    # One change of the network at a time: each subnet waits for the one before it.
    for name, before in (("load-balancers", "nodes"), ("burst-subnet", "load-balancers")):
        assert before in {urn.rsplit("::", 1)[-1] for urn in mocks.dependencies[name]}, name
    # The autoscaler makes the pool's servers: raya declares none, nor a record.
    assert sorted(result.of_type(SERVER)) == ["agent-0", "control-plane", "web-0", "web-1"]
