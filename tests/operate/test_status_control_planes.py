"""`raya status` with three control planes: they come first in their order, `cp`, the API's
name, is judged against every control plane's address, and each etcd member and the API
servers that serve are shown, from the Kubernetes stand-in's etcd section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raya.operate import status as st
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_control_planes import run as run_sized
from tests.cloud.program.test_control_planes import sized
from tests.cloud.program.test_program import PINS, provider_mocks
from tests.operate import kube_api as ka
from tests.operate.test_status import _healthy_facts


def test_cp_holds_every_control_planes_address() -> None:
    outputs: dict[str, Any] = run_sized(provider_mocks(), sized(3)).outputs
    servers = outputs["servers"]
    everyone = [servers[n]["ipv4"] for n in ("control-plane-2", "control-plane", "control-plane-1")]
    facts = _healthy_facts(outputs)
    facts["records"]["control-plane"] = everyone  # any order, as name servers answer
    report = st.assess(outputs, PINS, "raya", **facts)
    assert [row.node for row in report.rows] == [
        "control-plane", "control-plane-1", "control-plane-2", "agent-0", "agent-1", "agent-2",
    ]  # fmt: skip
    assert report.healthy
    # cp answering with the first alone misses two control planes.
    facts["records"]["control-plane"] = [servers["control-plane"]["ipv4"]]
    (row, *_) = st.assess(outputs, PINS, "raya", **facts).rows
    assert row.checks["dns"].state == st.UNHEALTHY
    assert "expected" in row.checks["dns"].text


# --- etcd members and API servers (the Kubernetes stand-in's etcd section) ---------------------

CONTROL_PLANES = {
    "control-plane": "10.0.1.10",
    "control-plane-1": "10.0.1.11",
    "control-plane-2": "10.0.1.12",
}


def _report(deployed: Run, state: ka.Cluster, folder: Path) -> dict[str, st.Check]:
    with ka.deployment_api(state, deployed.resources, folder) as url:
        return st.kubernetes_control_planes(deployed.outputs["kubeconfig"], CONTROL_PLANES, url)


def _three(clock: list[float]) -> ka.Cluster:
    state = ka.Cluster(
        nodes={
            name: ka.node_object(name, PINS.k3s.version) for name in [*CONTROL_PLANES, "agent-0"]
        },
        clock=lambda: clock[0],
    )
    ka.Etcd.of(state, CONTROL_PLANES)
    return state


def test_status_shows_each_etcd_member_and_the_api_servers(deployed: Run, tmp_path: Path) -> None:
    clock = [0.0]
    state = _three(clock)
    assert state.etcd is not None
    names = {node: member.name for node, member in state.etcd.members.items()}
    healthy = _report(deployed, state, tmp_path)
    assert {name: (check.state, check.text) for name, check in healthy.items()} == {
        **{
            f"etcd {node}": (st.HEALTHY, f"voter, Ready, member {names[node]}")
            for node in CONTROL_PLANES
        },
        "API servers": (
            st.HEALTHY,
            "control-plane (10.0.1.10), control-plane-1 (10.0.1.11), control-plane-2 (10.0.1.12)",
        ),
    }
    # control-plane-2's host dies; a minute later its node is not Ready (40 s), its member
    # Unhealthy (the leader's 15 s tick) and its API server's lease gone (15 s).
    state.server_deleted("control-plane-2")
    clock[0] = 60.0
    degraded = _report(deployed, state, tmp_path)
    assert degraded["etcd control-plane-2"] == st.bad(
        f"unhealthy, not Ready, member {names['control-plane-2']}: failed to check etcd member "
        "status: context deadline exceeded"
    )
    assert degraded["etcd control-plane"].state == st.HEALTHY
    assert degraded["API servers"] == st.bad(
        "control-plane-2 (10.0.1.12) not serving; serving: control-plane (10.0.1.10), "
        "control-plane-1 (10.0.1.11)"
    )


def test_a_learner_and_a_missing_member_are_unhealthy(deployed: Run, tmp_path: Path) -> None:
    clock = [0.0]
    state = _three(clock)
    assert state.etcd is not None
    state.etcd.members["control-plane-1"].learner = True
    state.etcd.catch_up = 3600
    del state.nodes["control-plane-2"]  # never registered
    clock[0] = 15.0
    report = _report(deployed, state, tmp_path)
    assert report["etcd control-plane-1"].state == st.UNHEALTHY
    assert report["etcd control-plane-1"].text.startswith("learner, Ready, member control-plane-1-")
    assert report["etcd control-plane-2"] == st.bad(
        "missing, not Ready: no node object: not registered"
    )


def test_an_unreachable_api_makes_etcd_unknown(deployed: Run) -> None:
    found = st.kubernetes_control_planes(
        deployed.outputs["kubeconfig"], CONTROL_PLANES, "https://127.0.0.1:9"
    )
    assert list(found) == ["etcd"]
    assert found["etcd"].state == st.UNKNOWN
    assert "unreachable" in found["etcd"].text
