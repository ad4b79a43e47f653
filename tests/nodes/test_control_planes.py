"""Rendering one, three and five control planes: the first starts the cluster's embedded etcd
(`cluster-init`), the others join through the registration address with the full server
token, each on its own volume; every certificate name clients use is in `tls-san`."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
import yaml

from raya.errors import RenderError
from raya.model.fleet import Cluster, build_cluster
from raya.nodes.identity import ClusterSecrets, generate_example_secrets
from raya.nodes.render import IGNITION_LIMIT, RenderedNode, render_cluster
from tests.nodes.conftest import CHARTS
from tests.nodes.tools import ignition_files

K3S_CONFIG = "/etc/rancher/k3s/config.yaml"
ZONE = "raya.example.com"


def sized(cluster: Cluster, count: int) -> Cluster:
    config = dataclasses.replace(cluster.config, control_planes=count)
    return build_cluster(config, ("cx23", "cx23"), "test fleet")


def volumes(cluster: Cluster) -> dict[str, str]:
    return {node.name: str(7000 + k) for k, node in enumerate(cluster.control_planes)}


def render(cluster: Cluster) -> tuple[dict[str, RenderedNode], ClusterSecrets]:
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    nodes = render_cluster(cluster, secrets, charts=CHARTS, volume_id=volumes(cluster))
    return {node.node.name: node for node in nodes}, secrets


def k3s_config(node: RenderedNode) -> dict[str, object]:
    loaded = yaml.safe_load(ignition_files(node.ignition)[K3S_CONFIG])
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.parametrize("count", [1, 3, 5])
def test_each_control_planes_k3s_config(cluster: Cluster, count: int) -> None:
    grown = sized(cluster, count)
    rendered, secrets = render(grown)
    ca_hash = hashlib.sha256(secrets.server_ca.cert_pem.encode()).hexdigest()
    # One control plane is its own registration address; several sit behind the private
    # load balancer at 10.0.1.15, five addresses after the first.
    registration = "https://10.0.1.10:6443" if count == 1 else "https://10.0.1.15:6443"
    names = [node.name for node in grown.control_planes]
    assert names == ["control-plane", *(f"control-plane-{k}" for k in range(1, count))]
    for k, name in enumerate(names):
        config = k3s_config(rendered[name])
        assert config["node-name"] == name
        assert config["node-ip"] == config["advertise-address"] == f"10.0.1.{10 + k}"
        assert config["agent-token"] == secrets.agent_secret
        own = [] if k == 0 else [f"cp{k}.{ZONE}"]
        # The balancer's address even for one: growing must not change the first's cert.
        assert config["tls-san"] == [f"cp.{ZONE}", *own, "10.0.1.15"]
        if k == 0:
            assert config["cluster-init"] is True and "server" not in config
            assert config["token"] == secrets.join_secret
        else:
            assert "cluster-init" not in config
            assert config["server"] == registration
            assert config["token"] == f"K10{ca_hash}::server:{secrets.join_secret}"
        # Its own volume, and no other's.
        text = rendered[name].ignition.decode()
        for other, volume_id in volumes(grown).items():
            assert (f"scsi-0HC_Volume_{volume_id}" in text) == (other == name), (name, other)
        assert len(rendered[name].ignition) <= IGNITION_LIMIT
    for agent in grown.agents:
        config = k3s_config(rendered[agent.name])
        assert config["server"] == registration
        assert config["token"] == f"K10{ca_hash}::node:{secrets.agent_secret}"
        assert secrets.join_secret not in rendered[agent.name].ignition.decode()


def test_growing_leaves_the_first_control_planes_config_as_it_is(cluster: Cluster) -> None:
    """Going from 1 to 3 changes nothing the first control plane was created with: it keeps
    running its config, and the joiners find the balancer's address in its certificate."""
    secrets = generate_example_secrets(node.name for node in sized(cluster, 3).nodes)
    before, after = (
        {node.node.name: node for node in render_cluster(
            grown, secrets, charts=CHARTS, volume_id=volumes(grown)
        )}
        for grown in (sized(cluster, 1), sized(cluster, 3))
    )  # fmt: skip
    assert before["control-plane"].ignition == after["control-plane"].ignition


def test_a_control_plane_without_its_volume_is_refused(cluster: Cluster) -> None:
    grown = sized(cluster, 3)
    secrets = generate_example_secrets(node.name for node in grown.nodes)
    missing = {name: id_ for name, id_ in volumes(grown).items() if name != "control-plane-2"}
    with pytest.raises(RenderError, match=r"^control-plane-2: volume_id is None; accepted"):
        render_cluster(grown, secrets, charts=CHARTS, volume_id=missing)



DATASTORE_SCRIPT = "/usr/local/bin/raya-k3s-datastore"
JOIN_CONFIG = "/etc/rancher/k3s/raya-join.yaml"


def units(node: RenderedNode) -> dict[str, str]:
    config = json.loads(node.ignition)
    return {unit["name"]: unit.get("contents", "") for unit in config["systemd"]["units"]}


@pytest.mark.parametrize("count", [1, 3, 5])
def test_the_first_control_plane_decides_to_start_or_join_before_each_start_of_k3s(
    cluster: Cluster, count: int
) -> None:
    """Only the first, whose config says cluster-init, carries the decision; the same at every
    size: it asks the four other addresses of the control plane block (10.0.1.11 to .14),
    and joins with the full server token. It runs before every start of k3s, not once a
    boot: k3s exits when etcd finds its member removed, and starts afresh the next time."""
    grown = sized(cluster, count)
    rendered, secrets = render(grown)
    ca_hash = hashlib.sha256(secrets.server_ca.cert_pem.encode()).hexdigest()
    first = rendered["control-plane"]
    files = ignition_files(first.ignition)
    assert yaml.safe_load(files[JOIN_CONFIG]) == {
        "cluster-init": False,
        "token": f"K10{ca_hash}::server:{secrets.join_secret}",
    }
    k3s = units(first)["k3s.service"].splitlines()
    (command,) = [line for line in k3s if line.startswith(f"ExecStartPre={DATASTORE_SCRIPT} ")]
    assert command.split()[1:] == [
        "/var/lib/rancher/k3s/server", JOIN_CONFIG,
        "/etc/rancher/k3s/config.yaml.d/40-raya-join.yaml",
        "10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.14",
    ]  # fmt: skip
    # After the volume's mount and seeding, with the network, and restarted when it fails.
    assert {
        "RequiresMountsFor=/var/lib/rancher/k3s/server", "After=network-online.target",
        "Restart=always",
    } <= set(k3s)  # fmt: skip
    assert not any("raya-k3s-datastore" in name for name in units(first))
    for node in [*grown.control_planes[1:], *grown.agents]:
        assert DATASTORE_SCRIPT not in "".join(units(rendered[node.name]).values())
        files = ignition_files(rendered[node.name].ignition)
        assert {JOIN_CONFIG, DATASTORE_SCRIPT}.isdisjoint(files)
