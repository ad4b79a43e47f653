from __future__ import annotations

import pytest

from raya.fleet import Cluster
from raya.github_keys import UserKeys, load_keys_file
from raya.identity import ClusterSecrets, generate_example_secrets
from raya.pins import ChartPins, load_chart_pins
from raya.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.render import RenderedNode, render_cluster

# The example project's chart pins: those of `raya render --example`.
CHARTS: ChartPins = load_chart_pins(EXAMPLE_ROOT)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    return load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)


@pytest.fixture(scope="session")
def secrets() -> ClusterSecrets:
    return generate_example_secrets()


@pytest.fixture(scope="session")
def users() -> tuple[UserKeys, ...]:
    return load_keys_file(EXAMPLE_ROOT / "keys.json")


@pytest.fixture(scope="session")
def rendered(
    cluster: Cluster, secrets: ClusterSecrets, users: tuple[UserKeys, ...]
) -> dict[str, RenderedNode]:
    nodes = render_cluster(cluster, secrets, users, charts=CHARTS)
    return {node.node.name: node for node in nodes}
