from __future__ import annotations

import pytest

from raya.model.fleet import Cluster
from raya.model.pins import ChartPins, load_chart_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.github_keys import UserKeys, load_keys_file
from raya.nodes.identity import ClusterSecrets, generate_example_secrets
from raya.nodes.render import RenderedNode, render_cluster

VOLUME_ID = "4242"  # the control plane's volume, as Hetzner would number it
# The example project's chart pins: those of `raya render --example`.
CHARTS: ChartPins = load_chart_pins(EXAMPLE_ROOT)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    return load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)


@pytest.fixture(scope="session")
def secrets(cluster: Cluster) -> ClusterSecrets:
    # Host keys for more agents than the example has: tests grow the fleet.
    names = [cluster.control_plane.name, *(f"agent-{i}" for i in range(8))]
    return generate_example_secrets(names)


@pytest.fixture(scope="session")
def users() -> tuple[UserKeys, ...]:
    return load_keys_file(EXAMPLE_ROOT / "keys.json")


@pytest.fixture(scope="session")
def rendered(cluster: Cluster, secrets: ClusterSecrets) -> dict[str, RenderedNode]:
    nodes = render_cluster(cluster, secrets, charts=CHARTS, volume_id=VOLUME_ID)
    return {node.node.name: node for node in nodes}
