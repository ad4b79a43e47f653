"""Pools on the bytes: each pool node's k3s config carries its name, address, labels and
taints; the list form renders exactly what raya rendered before pools existed."""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
from pathlib import Path
from typing import Any

import yaml

from raya.model.fleet import Cluster, Fleet, Pool, build_cluster
from raya.nodes.identity import CertificateAuthority, ClusterSecrets, HostKey
from raya.nodes.render import render_cluster, render_node
from tests.nodes.conftest import CHARTS, VOLUME_ID
from tests.nodes.tools import ignition_files, ignition_validate

K3S_CONFIG = "/etc/rancher/k3s/config.yaml"
DATA = Path(__file__).parent.parent / "data" / "list-form"


def mixed(cluster: Cluster) -> Cluster:
    return build_cluster(
        cluster.config,
        Fleet(
            agents=("cx23",),
            pools=(
                Pool(
                    name="web",
                    server_type="cx33",
                    count=2,
                    addresses=ipaddress.IPv4Network("10.0.1.64/28"),
                    labels=(("example.com/team", "shop"), ("tier", "web")),
                    taints=("dedicated=web:NoSchedule", "spot:PreferNoSchedule"),
                ),
                Pool(
                    name="arm",
                    server_type="cax21",
                    count=1,
                    addresses=ipaddress.IPv4Network("10.0.1.128/27"),
                    location="fsn1",
                ),
            ),
        ),
        "agents.json",
    )


def test_pool_nodes_register_with_their_labels_and_taints(
    cluster: Cluster, secrets: ClusterSecrets, tmp_path: Path
) -> None:
    fleet = mixed(cluster)
    names = [node.name for node in fleet.nodes]
    keys = {name: secrets.host_keys["agent-0"] for name in names}
    pooled = dataclasses.replace(secrets, host_keys={**secrets.host_keys, **keys})
    nodes = render_cluster(fleet, pooled, charts=CHARTS, volume_id=VOLUME_ID)
    for node in nodes:  # the real Ignition validator takes each
        path = tmp_path / f"{node.node.name}.ign"
        path.write_bytes(node.ignition)
        assert ignition_validate(path).returncode == 0, node.node.name
    rendered = {
        node.node.name: yaml.safe_load(ignition_files(node.ignition)[K3S_CONFIG])
        for node in nodes
    }
    assert rendered["web-1"]["node-name"] == "web-1"
    assert rendered["web-1"]["node-ip"] == "10.0.1.65"
    assert rendered["web-1"]["node-label"] == ["example.com/team=shop", "tier=web"]
    assert rendered["web-1"]["node-taint"] == [
        "dedicated=web:NoSchedule",
        "spot:PreferNoSchedule",
    ]
    assert rendered["arm-0"]["node-name"] == "arm-0"
    assert rendered["arm-0"]["node-ip"] == "10.0.1.128"
    for name in ("arm-0", "agent-0"):
        assert "node-label" not in rendered[name] and "node-taint" not in rendered[name]
    # The agent of the list renders the same whether pools sit beside it or not.
    alone = build_cluster(cluster.config, ("cx23",), "agents.json")
    assert (
        render_node(fleet, fleet.agents[0], pooled, charts=CHARTS).ignition
        == render_node(alone, alone.agents[0], pooled, charts=CHARTS).ignition
    )


def load_secrets(path: Path) -> ClusterSecrets:
    data: dict[str, Any] = json.loads(path.read_text())
    return ClusterSecrets(
        **{
            **data,
            "server_ca": CertificateAuthority(**data["server_ca"]),
            "client_ca": CertificateAuthority(**data["client_ca"]),
            "host_keys": {name: HostKey(**key) for name, key in data["host_keys"].items()},
        }
    )


def test_the_list_form_renders_the_bytes_raya_rendered_before_pools(cluster: Cluster) -> None:
    """The example fleet (the list form), rendered with fixed throwaway secrets, against the
    sha256 of each node's Ignition as rendered by raya before pools, with the same secrets
    (tests/data/list-form/README.md says which tree wrote `digests.json`)."""
    secrets = load_secrets(DATA / "secrets.json")
    expected = json.loads((DATA / "digests.json").read_text())
    rendered = render_cluster(cluster, secrets, charts=CHARTS, volume_id=VOLUME_ID)
    assert {
        node.node.name: hashlib.sha256(node.ignition).hexdigest() for node in rendered
    } == expected
