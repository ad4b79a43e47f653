"""Storage follows locations: the program on fleets whose nodes are in one, two and three
locations renders, on the control plane, one StorageClass per location where pods run, and
each class's claims go, as Hetzner's CSI driver and Kubernetes decide (`csi_topology`, from
their source), to the nodes of that location only, before and after the volume exists."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

import kubernetes_validate
import pytest
import yaml

from raya.model.fleet import Cluster, Fleet, Pool, build_cluster
from tests.cloud.program import csi_topology as csi
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import reveal
from tests.cloud.program.test_program import EXAMPLE, SERVER, provider_mocks, run, user_data
from tests.nodes.test_addons import K8S_VERSION

CHARTS = "/var/lib/raya/k3s-server-seed/manifests/raya-helm-charts.yaml"
K3S_CONFIG = "/etc/rancher/k3s/config.yaml"
LIST = ("agent-0", "agent-1", "agent-2")  # the example's agents, in its location (nbg1)


def pool(name: str, count: int, block: str, location: str, **more: Any) -> Pool:
    return Pool(name, "cx23", count, ipaddress.IPv4Network(block), location=location, **more)


FSN = pool("fsn", 2, "10.0.1.64/28", "fsn1")
HEL = pool("hel", 1, "10.0.1.80/28", "hel1")


def cluster(agents: tuple[str, ...], *pools: Pool, schedulable: bool = False) -> Cluster:
    config = dataclasses.replace(EXAMPLE.config, control_plane_schedulable=schedulable)
    return build_cluster(config, Fleet(agents=agents, pools=pools), "test fleet")


def deployed(fleet: Cluster) -> tuple[dict[str, dict[str, str]], list[dict[str, Any]]]:
    """The node labels the driver publishes for each server a pod without tolerations may go
    to (its location; its taints from its k3s config), and the StorageClasses the control
    plane's manifests hold."""
    result = run(provider_mocks(), fleet)
    texts = user_data(result)
    labels = {}
    for name, server in result.of_type(SERVER).items():
        k3s = yaml.safe_load(ignition_files(texts[name])[K3S_CONFIG])
        if csi.takes_plain_pods(k3s.get("node-taint") or []):
            labels[name] = csi.published_labels(reveal(server.inputs)["location"])
    manifest = yaml.safe_load_all(ignition_files(texts["control-plane"])[CHARTS])
    classes = [doc for doc in manifest if doc["kind"] == "StorageClass"]
    return labels, classes


@pytest.mark.parametrize(
    ("fleet", "places"),
    [
        (cluster(("cx23",) * 3), {"nbg1": LIST}),
        (cluster(("cx23",) * 3, FSN), {"nbg1": LIST, "fsn1": ("fsn-0", "fsn-1")}),
        (
            cluster(("cx23",) * 3, FSN, HEL),
            {"nbg1": LIST, "fsn1": ("fsn-0", "fsn-1"), "hel1": ("hel-0",)},
        ),
        # The control plane (in nbg1) takes pods: nbg1 has a class, its node the only one.
        (
            cluster((), FSN, schedulable=True),
            {"nbg1": ("control-plane",), "fsn1": ("fsn-0", "fsn-1")},
        ),
        # It does not: no pod runs in nbg1, no class for it.
        (cluster((), FSN), {"fsn1": ("fsn-0", "fsn-1")}),
    ],
    ids=["one location", "two locations", "three locations", "cp schedulable", "cp tainted"],
)
def test_one_class_per_location_taking_only_that_locations_nodes(
    fleet: Cluster, places: dict[str, tuple[str, ...]]
) -> None:
    labels, classes = deployed(fleet)
    assert sorted(c["metadata"]["name"] for c in classes) == sorted(
        f"hcloud-volumes-{location}" for location in places
    )
    for storage_class in classes:
        kubernetes_validate.validate(storage_class, K8S_VERSION, strict=True)
        location = storage_class["metadata"]["name"].removeprefix("hcloud-volumes-")
        assert storage_class["reclaimPolicy"] == "Retain"
        # Before the volume exists: where the scheduler may put the claim's first pod.
        allowed = sorted(
            name
            for name, found in labels.items()
            if csi.topology_matches(storage_class["allowedTopologies"], found)
        )
        assert allowed == sorted(places[location]), storage_class["metadata"]["name"]
        # Wherever of those it goes, the driver creates the volume in that location, and the
        # volume's pods may go to that location's nodes only, for good.
        for first in allowed:
            affinity = csi.provision(storage_class, labels[first])
            after = sorted(
                n for n, found in labels.items() if csi.affinity_matches(affinity, found)
            )
            assert after == sorted(places[location])


def test_the_default_class_creates_the_volume_where_its_first_pod_lands() -> None:
    """The chart's `hcloud-volumes` (WaitForFirstConsumer, no allowedTopologies): any node
    takes the first pod, and the volume's pods stay in that one's location."""
    labels, _ = deployed(cluster(("cx23",) * 3, FSN))
    default = {
        "provisioner": "csi.hetzner.cloud",
        "volumeBindingMode": "WaitForFirstConsumer",  # the chart's template, its only mode
    }
    # The control plane is tainted: not for a pod without tolerations.
    anywhere = sorted(n for n, found in labels.items() if csi.topology_matches([], found))
    assert anywhere == ["agent-0", "agent-1", "agent-2", "fsn-0", "fsn-1"]
    for first, then in (("fsn-1", ["fsn-0", "fsn-1"]), ("agent-0", list(LIST))):
        affinity = csi.provision(default, labels[first])
        assert sorted(n for n, f in labels.items() if csi.affinity_matches(affinity, f)) == then
    # Requirements naming no location: the driver refuses rather than guess.
    with pytest.raises(csi.ProvisioningFailed):
        csi.provision(default, {"kubernetes.io/hostname": "agent-0"})
