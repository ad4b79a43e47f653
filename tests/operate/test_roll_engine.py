"""`raya roll` end to end through the engine model and the Hetzner model
(tests/cloud/program/engine.py, hetzner.py): the real program, replaced as the engine plans it,
against a Kubernetes API stand-in over real TLS where a node registers again, with a new boot,
only when Hetzner has created its server again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from raya.cli import app
from raya.cloud.kubeconfig import api_client
from raya.nodes.identity import CertificateAuthority
from raya.operate import roll as rl
from tests.cloud.program import fakes
from tests.cloud.program.engine import Cloud, deployed_cloud
from tests.cloud.program.test_program import PINS, provider_mocks

OLD = "v1.30.0+k3s1"
NODES = ["control-plane", "agent-0", "agent-1", "agent-2"]


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    example = provider_mocks()
    return deployed_cloud(project, monkeypatch, example.zones, example.snapshots)


@pytest.fixture
def created() -> list[tuple[str, bool, list[str]]]:
    """Each node whose server Hetzner created: whether it was cordoned, its pods left."""
    return []


@pytest.fixture
def cluster(cloud: Cloud, created: list[tuple[str, bool, list[str]]]) -> fakes.Cluster:
    """The nodes on an old k3s, agent-0 running a Deployment's pod and a DaemonSet's; a node
    booting on a server Hetzner creates registers with a new boot ID, on the pin."""
    state = fakes.Cluster(nodes={name: fakes.node(name, OLD) for name in NODES})
    state.pods = [
        fakes.pod("web-1", "default", "agent-0"),
        fakes.pod("flannel-x", "kube-system", "agent-0", owner="DaemonSet"),
    ]

    def boots(server_name: str) -> None:
        name = server_name.removeprefix("raya-")
        with state.lock:
            node = state.nodes[name]
            pods = sorted(
                p["metadata"]["name"] for p in state.pods if p["spec"]["nodeName"] == name
            )
            created.append((name, bool(node["spec"]["unschedulable"]), pods))
            node["status"]["nodeInfo"]["bootID"] = str(uuid.uuid4())
            node["status"]["nodeInfo"]["kubeletVersion"] = PINS.k3s.version

    cloud.hetzner.on_create = boots
    return state


@pytest.fixture
def api(cloud: Cloud, cluster: fakes.Cluster, tmp_path: Path) -> Iterator[str]:
    resources = cloud.engine.resources
    server_ca = CertificateAuthority(
        resources["server-ca"].outputs["certPem"],
        resources["server-ca-key"].outputs["privateKeyPem"],
    )
    client_ca = resources["client-ca"].outputs["certPem"]
    name = "cp.raya.example.com"
    with fakes.kubernetes_api(cluster, server_ca, client_ca, tmp_path, name) as url:
        yield url


def test_roll_of_an_agent_and_the_control_plane_deletes_each_old_server_first(
    cloud: Cloud,
    cluster: fakes.Cluster,
    created: list[tuple[str, bool, list[str]]],
    api: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "raya.commands.operate.kube_api_client", lambda text: api_client(text, server=api)
    )
    monkeypatch.setattr(rl, "POLL", 0.01)
    (volume,) = cloud.hetzner.volumes.values()
    mark = len(cloud.hetzner.log)
    roll = ["roll", "control-plane", "agent-0", "--root", str(cloud.root)]
    result = CliRunner().invoke(app, roll)
    assert result.exit_code == 0, result.output
    # The agent first, then the control plane; each old server stopped and deleted before
    # the new one is created, the volume detached by the deletion and attached to the new one.
    assert cloud.since(mark) == [
        "shutdown server raya-agent-0",
        "delete server raya-agent-0 (off)",
        "create server raya-agent-0",
        "shutdown server raya-control-plane",
        "detach volume raya-control-plane-state (server deleted)",
        "delete server raya-control-plane (off)",
        "create server raya-control-plane",
        "attach volume raya-control-plane-state to raya-control-plane",
    ]
    new = cloud.hetzner.server_named("raya-control-plane")
    assert new is not None and volume.server == new.id
    # agent-0's server was re-created once it was cordoned and drained (its DaemonSet pod
    # stays, as with kubectl drain); the control plane is not drained.
    assert created == [
        ("agent-0", True, ["flannel-x"]),
        ("control-plane", False, []),
    ]
    assert cluster.nodes["agent-0"]["spec"]["unschedulable"] is False
    assert "rolled 2 node(s)" in result.stdout
