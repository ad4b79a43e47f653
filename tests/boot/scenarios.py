"""The boot scenarios, shared by the boot tests and bench/boot.py (which prints timings).

One fleet boots at once on one simulated Hetzner network: the control plane and two agents
as provisioned, an agent whose metadata service answers 503 at first, and agents whose
private NIC gets its link late or is hot-plugged late (as the hcloud provider does when it
attaches the network after starting the server). A second, small boot pits an agent
against a control plane holding another CA. A third boots three control planes behind the
registration load balancer: the first starts the cluster, the others join through the
balancer; once they have, the first leaves the network and only then does an agent boot,
registering through the balancer with one control plane down.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from raya.model.fleet import Cluster, build_cluster
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import ClusterSecrets, generate_example_secrets
from raya.nodes.render import RenderedNode, render_cluster
from tests.boot.balancer import Balancer
from tests.boot.sim import Attachment, BootedNode, Fleet, NodePlan, booted
from tests.nodes.conftest import CHARTS, VOLUME_ID

METADATA_UNAVAILABLE_FOR = 20.0
LATE = 10.0
VERY_LATE = 60.0
# Past the latest NIC, with room for the node to take it up on a busy machine.
FLEET_DEADLINE = VERY_LATE + 40
REFUSAL_DEADLINE = 40.0


@dataclass(frozen=True)
class Scenario:
    node: str
    what: str
    attachment: Attachment = "present"
    delay: float = 0.0
    metadata_unavailable_for: float = 0.0


FLEET = (
    Scenario("control-plane", "control plane, booting with the agents"),
    Scenario("agent-0", "agent, booting with the control plane"),
    Scenario("agent-1", "agent, booting with the control plane"),
    Scenario("agent-2", "metadata 503 at first", metadata_unavailable_for=METADATA_UNAVAILABLE_FOR),
    Scenario("agent-3", "private NIC present, link late", "late-link", LATE),
    Scenario("agent-4", "private NIC present, link very late", "late-link", VERY_LATE),
    Scenario("agent-5", "private NIC hot-plugged late", "hot-plug", LATE),
    Scenario("agent-6", "private NIC hot-plugged very late", "hot-plug", VERY_LATE),
)  # fmt: skip


def fleet_cluster() -> Cluster:
    """The example cluster with an agent per scenario."""
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    agents = ("cx23",) * (len(FLEET) - 1)
    return build_cluster(example.config, agents, "the boot scenarios")


def render(cluster: Cluster, secrets: ClusterSecrets) -> dict[str, RenderedNode]:
    volumes = {node.name: f"{VOLUME_ID}{k}" for k, node in enumerate(cluster.control_planes)}
    nodes = render_cluster(cluster, secrets, charts=CHARTS, volume_id=volumes)
    return {node.node.name: node for node in nodes}


def k3s_unit(node: BootedNode) -> str:
    return "k3s.service" if node.plan.name.startswith("control-plane") else "k3s-agent.service"


def _k3s_ready(node: BootedNode) -> bool:
    """k3s started; on the control plane, the local-path class turned non-default after."""
    units = [k3s_unit(node)]
    if node.plan.name == "control-plane":
        units.append("raya-local-path.service")
    return all(node.job_done(unit) is not None for unit in units)


def _plan(rendered: RenderedNode, scenario: Scenario) -> NodePlan:
    return NodePlan(
        name=scenario.node,
        ignition=rendered.ignition,
        private_ip=rendered.node.private_ip,
        attachment=scenario.attachment,
        delay=scenario.delay,
        metadata_unavailable_for=scenario.metadata_unavailable_for,
    )


@contextlib.contextmanager
def boot_fleet() -> Iterator[dict[str, BootedNode]]:
    cluster = fleet_cluster()
    rendered = render(cluster, generate_example_secrets(node.name for node in cluster.nodes))
    plans = [_plan(rendered[scenario.node], scenario) for scenario in FLEET]
    with booted(plans, _k3s_ready, FLEET_DEADLINE) as nodes:
        yield nodes


def _refused(node: BootedNode) -> bool:
    return any("join refused" in event.message for event in node.logged("k3s"))


@contextlib.contextmanager
def boot_impostor() -> Iterator[dict[str, BootedNode]]:
    """agent-0 as rendered for the cluster, and a control plane at the right address but
    rendered with other secrets (so another server CA)."""
    cluster = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    names = [node.name for node in cluster.nodes]
    real = render(cluster, generate_example_secrets(names))
    impostor = render(cluster, generate_example_secrets(names))
    plans = [
        _plan(impostor["control-plane"], Scenario("control-plane", "impostor")),
        _plan(real["agent-0"], Scenario("agent-0", "agent facing the impostor")),
    ]

    def done(node: BootedNode) -> bool:
        return _k3s_ready(node) if node.plan.name == "control-plane" else _refused(node)

    with booted(plans, done, REFUSAL_DEADLINE) as nodes:
        yield nodes


def timings(node: BootedNode) -> dict[str, float | None]:
    """Seconds after launch at which the node reached each step (None: never)."""
    steps = {
        "online": node.job_done("network-online.target"),
        "node-metadata": node.job_done("raya-node-metadata.service"),
        "k3s": node.job_done(k3s_unit(node)),
    }
    return {step: None if event is None else round(event.at, 2) for step, event in steps.items()}


HA_DEADLINE = 150.0


def ha_cluster() -> Cluster:
    """The example cluster with three control planes and one agent."""
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    config = dataclasses.replace(example.config, control_planes=3)
    return build_cluster(config, ("cx23",), "the HA boot scenario")


def _joined(node: BootedNode) -> bool:
    return any(e.message.startswith("joined ") for e in node.logged("k3s"))


@contextlib.contextmanager
def boot_ha() -> Iterator[tuple[dict[str, BootedNode], Balancer, ClusterSecrets]]:
    """Three control planes and agent-0, the agent held until the first control plane is off
    the network; yields the nodes, the balancer (its log says who reached whom) and the
    secrets they were rendered with."""
    cluster = ha_cluster()
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    rendered = render(cluster, secrets)
    plans = [
        _plan(rendered[node.name], Scenario(node.name, "HA"))
        for node in cluster.control_planes
    ]
    agent = _plan(rendered["agent-0"], Scenario("agent-0", "HA"))
    plans.append(dataclasses.replace(agent, held=True))
    balancer = Balancer(
        cluster.config.registration_ip, 6443, [n.private_ip for n in cluster.control_planes]
    )
    joiners = [node.name for node in cluster.control_planes[1:]]

    cut: list[str] = []

    def step(fleet: Fleet) -> None:
        first = cluster.control_plane
        if not cut and all(_joined(fleet.nodes[name]) for name in joiners):
            fleet.cut(first.name)
            cut.append(first.name)
        # The agent boots once the balancer has seen the first control plane go.
        waiting = fleet.nodes["agent-0"].process is None
        if cut and waiting and first.private_ip not in balancer.healthy:
            fleet.start("agent-0")

    with booted(plans, _k3s_ready, HA_DEADLINE, balancer=balancer, step=step) as nodes:
        yield nodes, balancer, secrets
