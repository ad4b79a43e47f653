"""The roll waits for a replaced node on the pinned kubelet (docs/using.md: "wait until the new
server registers a new Node (a new boot, the new server's provider ID), Ready on the pinned
k3s"): a node back from a new boot and Ready, but on another k3s, is not back; the roll stops
there."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from raya.operate import roll as rl
from tests.cloud.program.mocks import Run
from tests.operate import kube_api as ka
from tests.operate.test_roll import BOOT, NODES, OLD, PIN, Clock, roller


@pytest.fixture
def nodes(clock: Clock) -> ka.Cluster:
    return ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in NODES}, clock=clock.now, boot=BOOT
    )


@pytest.fixture
def url(deployed: Run, nodes: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(nodes, deployed.resources, tmp_path) as served:
        yield served


def test_a_node_back_on_another_kubelet_stops_the_roll(
    deployed: Run, nodes: ka.Cluster, url: str, clock: Clock
) -> None:
    def replace_with_old_k3s(names: Sequence[str]) -> None:
        # A server that boots a snapshot of the old k3s: a new boot, Ready, not the pin.
        with nodes.lock:
            for name in names:
                nodes.server_deleted(name)
                nodes.server_created(name, OLD)

    steps = rl.plan(NODES, ["agent-1", "agent-2"], [])
    with pytest.raises(rl.RollError) as caught:
        roller(deployed, url, replace_with_old_k3s, clock, ready_timeout=600).run(steps)
    assert str(caught.value).startswith(
        f"agent-1: not back from a new boot Ready on {PIN} after 600 s "
        f"(last seen: Ready {OLD}, a new boot)"
    )
    assert str(caught.value).endswith("not touched: agent-2")
    assert nodes.nodes["agent-2"]["spec"]["unschedulable"] is False
