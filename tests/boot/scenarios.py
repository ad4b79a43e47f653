"""The boot scenarios, shared by the boot tests and bench/boot.py (which prints timings).

One fleet boots on one simulated Hetzner network: the control plane with its volume present
at boot and two agents as provisioned, an agent whose metadata service answers 503 at first,
one for which GitHub answers 503 at first, and agents whose private NIC gets its link late
or is hot-plugged late (as the hcloud provider does when it attaches the network after
starting the server). At the same time, each on a network of its own: an agent against a
control plane holding another CA, a control plane per volume scenario (attached 20 s
and 150 s late, never attached, holding a foreign filesystem), and three control planes
behind the registration load balancer: the first starts the cluster, the others join through
the balancer; once they have, the first leaves the network and only then does an agent boot,
registering through the balancer with one control plane down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from raya.model.fleet import Cluster, build_cluster
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import ClusterSecrets, generate_example_secrets
from raya.nodes.render import RenderedNode, render_cluster
from tests.boot.balancer import Balancer
from tests.boot.sim import (
    Attachment,
    BootedNode,
    Fleet,
    NodePlan,
    VolumePlan,
    booted,
    booted_at_once,
)
from tests.nodes.conftest import CHARTS, VOLUME_ID

METADATA_UNAVAILABLE_FOR = 20.0
GITHUB_UNAVAILABLE_FOR = 15.0
LATE = 10.0
VERY_LATE = 60.0
# Past the latest NIC, with room for the node to take it up on a busy machine (the volume
# scenarios booting alongside take longer anyway: the room costs nothing when all is well).
FLEET_DEADLINE = VERY_LATE + 100
# The impostor's control plane starts on a blank volume: its datastore guard first asks the
# other control planes' addresses, which nobody answers (three rounds of connect timeouts,
# about 30-40 s), before k3s starts; the agent's refusal follows.
REFUSAL_DEADLINE = 100.0
VOLUME_LATE = 20.0
VOLUME_VERY_LATE = 150.0
# A volume that never comes (or is refused) is watched past systemd's default device timeout
# (90 s), the one that ended a late volume in the emergency shell when Ignition mounted it.
NEVER_WATCHED = 100.0
VOLUME_DEADLINE = VOLUME_VERY_LATE + 40


@dataclass(frozen=True)
class Scenario:
    node: str
    what: str
    attachment: Attachment = "present"
    delay: float = 0.0
    metadata_unavailable_for: float = 0.0
    github_unavailable_for: float = 0.0
    volume: VolumePlan | None = None


FLEET = (
    Scenario("control-plane", "control plane, volume there at boot", volume=VolumePlan(VOLUME_ID)),
    Scenario("agent-0", "agent, booting with the control plane"),
    Scenario("agent-1", "GitHub 503 at first", github_unavailable_for=GITHUB_UNAVAILABLE_FOR),
    Scenario("agent-2", "metadata 503 at first", metadata_unavailable_for=METADATA_UNAVAILABLE_FOR),
    Scenario("agent-3", "private NIC present, link late", "late-link", LATE),
    Scenario("agent-4", "private NIC present, link very late", "late-link", VERY_LATE),
    Scenario("agent-5", "private NIC hot-plugged late", "hot-plug", LATE),
    Scenario("agent-6", "private NIC hot-plugged very late", "hot-plug", VERY_LATE),
)  # fmt: skip


# Each boots the fleet's control plane config alone, on a network of its own.
VOLUMES = (
    Scenario("late", f"volume attached {VOLUME_LATE:.0f} s late",
             volume=VolumePlan(VOLUME_ID, VOLUME_LATE)),
    Scenario("very-late", f"volume attached {VOLUME_VERY_LATE:.0f} s late",
             volume=VolumePlan(VOLUME_ID, VOLUME_VERY_LATE)),
    Scenario("never", "volume never attached", volume=VolumePlan(VOLUME_ID, None)),
    Scenario("foreign", "volume holding another filesystem",
             volume=VolumePlan(VOLUME_ID, 0.0, foreign=True)),
)  # fmt: skip


def fleet_cluster() -> Cluster:
    """The example cluster with an agent per scenario."""
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    agents = ("cx23",) * (len(FLEET) - 1)
    return build_cluster(example.config, agents, "the boot scenarios")


def volume_ids(cluster: Cluster) -> dict[str, str]:
    """A made-up volume id per control plane: the first's VOLUME_ID, as the others' tests have."""
    return {
        node.name: VOLUME_ID if k == 0 else f"{VOLUME_ID}{k}"
        for k, node in enumerate(cluster.control_planes)
    }


def render(cluster: Cluster, secrets: ClusterSecrets) -> dict[str, RenderedNode]:
    nodes = render_cluster(cluster, secrets, charts=CHARTS, volume_id=volume_ids(cluster))
    return {node.node.name: node for node in nodes}


def k3s_unit(node: BootedNode) -> str:
    return "k3s.service" if node.plan.name.startswith("control-plane") else "k3s-agent.service"


def _k3s_ready(node: BootedNode) -> bool:
    """k3s started; on the control plane, the local-path class turned non-default after."""
    units = [k3s_unit(node)]
    if node.plan.name == "control-plane":
        units.append("raya-local-path.service")
    return all(node.job_done(unit) is not None for unit in units)


def _fleet_ready(node: BootedNode) -> bool:
    return _k3s_ready(node) and node.job_done("raya-ssh-keys.service") is not None


def _plan(rendered: RenderedNode, scenario: Scenario) -> NodePlan:
    return NodePlan(
        name=scenario.node,
        ignition=rendered.ignition,
        private_ip=rendered.node.private_ip,
        attachment=scenario.attachment,
        delay=scenario.delay,
        metadata_unavailable_for=scenario.metadata_unavailable_for,
        github_unavailable_for=scenario.github_unavailable_for,
        volume=scenario.volume,
    )


def _volume_settled(node: BootedNode) -> bool:
    """Done when k3s runs; a volume never attached, or refused, is watched NEVER_WATCHED
    seconds (k3s must not start meanwhile; the 150 s scenario sets the wall time anyway)."""
    volume = node.plan.volume
    assert volume is not None
    if volume.attach_after is None or volume.foreign:
        return time.monotonic() - node.launched >= NEVER_WATCHED
    return _k3s_ready(node)


@dataclass
class Boots:
    fleet: dict[str, BootedNode]
    impostor: dict[str, BootedNode]
    volumes: dict[str, BootedNode]  # by VOLUMES scenario
    # Three control planes and agent-0; the balancer (its log says who reached whom); the
    # secrets they were rendered with.
    ha: tuple[dict[str, BootedNode], Balancer, ClusterSecrets]


@contextlib.contextmanager
def boot_everything() -> Iterator[Boots]:
    """The fleet, the impostor pair and the volume scenarios, all booting at once."""
    cluster = fleet_cluster()
    rendered = render(cluster, generate_example_secrets(node.name for node in cluster.nodes))
    fleet = [_plan(rendered[scenario.node], scenario) for scenario in FLEET]
    volumes = [
        (
            [_plan(rendered["control-plane"], dataclasses.replace(scenario, node="control-plane"))],
            _volume_settled,
            VOLUME_DEADLINE,
        )
        for scenario in VOLUMES
    ]
    ha_plans, balancer, step, ha_secrets = _ha_group()
    managers = [
        booted(fleet, _fleet_ready, FLEET_DEADLINE),
        booted(*_impostor_group()),
        *(booted(*group) for group in volumes),
        booted(ha_plans, _k3s_ready, HA_DEADLINE, balancer=balancer, step=step),
    ]
    with booted_at_once(managers) as (fleet_nodes, impostor_nodes, *rest):
        *volume_nodes, ha_nodes = rest
        yield Boots(
            fleet=fleet_nodes,
            impostor=impostor_nodes,
            volumes={
                scenario.node: nodes["control-plane"]
                for scenario, nodes in zip(VOLUMES, volume_nodes, strict=True)
            },
            ha=(ha_nodes, balancer, ha_secrets),
        )


def _refused(node: BootedNode) -> bool:
    return any("join refused" in event.message for event in node.logged("k3s"))


def _impostor_group() -> tuple[list[NodePlan], Callable[[BootedNode], bool], float]:
    """agent-0 as rendered for the cluster, and a control plane at the right address but
    rendered with other secrets (so another server CA)."""
    cluster = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    names = [node.name for node in cluster.nodes]
    real = render(cluster, generate_example_secrets(names))
    impostor = render(cluster, generate_example_secrets(names))
    plans = [
        _plan(
            impostor["control-plane"],
            Scenario("control-plane", "impostor", volume=VolumePlan(VOLUME_ID)),
        ),
        _plan(real["agent-0"], Scenario("agent-0", "agent facing the impostor")),
    ]

    def done(node: BootedNode) -> bool:
        return _k3s_ready(node) if node.plan.name == "control-plane" else _refused(node)

    return plans, done, REFUSAL_DEADLINE


def timings(node: BootedNode) -> dict[str, float | None]:
    """Seconds after launch at which the node reached each step (None: never)."""
    steps = {
        "online": node.job_done("network-online.target"),
        "node-metadata": node.job_done("raya-node-metadata.service"),
        "ssh-keys": node.job_done("raya-ssh-keys.service"),
        "k3s": node.job_done(k3s_unit(node)),
    }
    return {step: None if event is None else round(event.at, 2) for step, event in steps.items()}


# The agent waits for the joiners and the balancer's health check: room on a busy machine.
HA_DEADLINE = 150.0


def ha_cluster() -> Cluster:
    """The example cluster with three control planes and one agent."""
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    config = dataclasses.replace(example.config, control_planes=3)
    return build_cluster(config, ("cx23",), "the HA boot scenario")


def _joined(node: BootedNode) -> bool:
    return any(e.message.startswith("joined ") for e in node.logged("k3s"))


def _ha_group() -> tuple[list[NodePlan], Balancer, Callable[[Fleet], None], ClusterSecrets]:
    """Three control planes, each with its volume there at boot, and agent-0, held until the
    first control plane is off the network and the balancer has seen it go."""
    cluster = ha_cluster()
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    rendered = render(cluster, secrets)
    volumes = volume_ids(cluster)
    plans = [
        _plan(rendered[node.name],
              Scenario(node.name, "HA", volume=VolumePlan(volumes[node.name])))
        for node in cluster.control_planes
    ]  # fmt: skip
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

    return plans, balancer, step, secrets
