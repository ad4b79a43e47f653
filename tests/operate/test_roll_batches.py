"""`raya roll` in batches against the Kubernetes API stand-in (tests/operate/kube_api.py:
evictions under PodDisruptionBudgets as the API server decides them, nodes back only from a
new boot): never more of a pool unavailable than `--max-unavailable` allows, counted at every
moment the roll waits; a budget that never allows stops its batch before any of its servers is
touched, and a roll run again on what is left finishes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from raya.model.unavailable import MaxUnavailable
from raya.operate import roll as rl
from tests.cloud.program.mocks import Run
from tests.operate import kube_api as ka
from tests.operate.test_roll import BOOT, OLD, PIN, Clock, Replacer, roller

AGENTS = [f"agent-{i}" for i in range(6)]
NODES = ["control-plane", *AGENTS]


class Watch(Clock):
    """The roll's clock, which also notes, each time the roll waits, the agents of the
    stand-in that are unavailable: cordoned, not Ready, or not registered."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster: ka.Cluster | None = None
        self.seen: list[frozenset[str]] = []

    def _sleep(self, seconds: float) -> None:
        assert self.cluster is not None
        with self.cluster.lock:
            self.cluster.settle()
            nodes = self.cluster.nodes
            self.seen.append(
                frozenset(
                    name
                    for name in AGENTS
                    if name not in nodes
                    or nodes[name]["spec"].get("unschedulable")
                    or not ka._node_ready(nodes[name])
                )
            )
        super()._sleep(seconds)


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def cluster(watch: Watch) -> ka.Cluster:
    state = ka.Cluster(
        nodes={name: ka.node_object(name, OLD) for name in NODES}, clock=watch.now, boot=BOOT
    )
    # Each agent runs a ReplicaSet's pod (30 s grace): a drain has something to wait for.
    state.pods = [ka.pod(f"web-{i}", "default", name) for i, name in enumerate(AGENTS)]
    watch.cluster = state
    return state


@pytest.fixture
def api(deployed: Run, cluster: ka.Cluster, tmp_path: Path) -> Iterator[str]:
    with ka.deployment_api(cluster, deployed.resources, tmp_path) as url:
        yield url


class Batches(Replacer):
    """The Replacer, noting each engine run's nodes."""

    def __init__(self, cluster: ka.Cluster) -> None:
        super().__init__(cluster)
        self.runs: list[list[str]] = []

    def __call__(self, names: Sequence[str]) -> None:
        self.runs.append(list(names))
        super().__call__(names)


POOLS = dict.fromkeys(AGENTS, "web") | {"control-plane": ""}


def test_max_unavailable_takes_a_count_or_a_percentage_and_refuses_anything_else() -> None:
    assert MaxUnavailable.parse("2").of(200) == 2
    assert MaxUnavailable.parse("10%").of(200) == 20
    assert MaxUnavailable.parse("10%").of(19) == 1  # 1.9, rounded down
    assert MaxUnavailable.parse("10%").of(3) == 1  # 0.3: at least one
    assert MaxUnavailable.parse("100%").of(7) == 7
    for bad in ("0", "0%", "-1", "1.5", "101%", "%", "", "ten", "05", "\uff11"):
        with pytest.raises(ValueError, match="accepted: a whole number of nodes from 1"):
            MaxUnavailable.parse(bad)


def test_batches_are_per_pool_with_control_planes_alone() -> None:
    pools = {"control-plane": "", "web-0": "web", "web-1": "web", "web-2": "web",
             "gpu-0": "gpu", "gpu-1": "gpu"}  # fmt: skip
    steps = rl.plan(list(pools), [], list(pools))
    planned = rl.batches(steps, pools, MaxUnavailable(count=2))
    assert [[s.node for s in batch] for batch in planned] == [
        ["control-plane"],
        ["web-0", "web-1", "gpu-0", "gpu-1"],
        ["web-2"],
    ]


def test_a_pools_own_limit_wins_over_the_commands() -> None:
    pools = {"control-plane": "", "web-0": "web", "web-1": "web", "web-2": "web",
             "gpu-0": "gpu", "gpu-1": "gpu", "gpu-2": "gpu"}  # fmt: skip
    steps = rl.plan(list(pools), [], list(pools))
    planned = rl.batches(steps, pools, MaxUnavailable(count=1), {"gpu": MaxUnavailable(count=3)})
    assert [[s.node for s in batch] for batch in planned] == [
        ["control-plane"],
        ["web-0", "gpu-0", "gpu-1", "gpu-2"],
        ["web-1"],
        ["web-2"],
    ]


def test_a_pool_with_its_own_limit_rolls_in_batches_of_it(
    deployed: Run, cluster: ka.Cluster, api: str, watch: Watch
) -> None:
    """The command's --max-unavailable says 1; the pool's own maxUnavailable, 50%: three of
    its six at a time, never more down."""
    replace = Batches(cluster)
    roll = roller(deployed, api, replace, watch, pools=POOLS,
                  max_unavailable=MaxUnavailable(count=1),
                  own_limits={"web": MaxUnavailable.parse("50%")})  # fmt: skip
    roll.run(rl.plan(NODES, AGENTS, []))
    assert replace.runs == [AGENTS[:3], AGENTS[3:]]
    assert max(len(down) for down in watch.seen) == 3


def test_a_pool_at_its_own_limit_is_refused_naming_it(
    deployed: Run, cluster: ka.Cluster, api: str, watch: Watch
) -> None:
    cluster.nodes["agent-5"]["spec"]["unschedulable"] = True
    replace = Batches(cluster)
    roll = roller(deployed, api, replace, watch, pools=POOLS,
                  max_unavailable=MaxUnavailable(count=3),
                  own_limits={"web": MaxUnavailable(count=1)})  # fmt: skip
    with pytest.raises(rl.RollError) as caught:
        roll.run(rl.plan(NODES, AGENTS[:2], []))
    assert str(caught.value).startswith(
        "refused before touching them: pool web has agent-5 unavailable, at most 1 may be "
        "(its maxUnavailable 1); "
    )
    assert replace.runs == []


@pytest.mark.parametrize(("limit", "runs"), [
    ("2", [["agent-0", "agent-1"], ["agent-2", "agent-3"], ["agent-4", "agent-5"]]),
    ("50%", [["agent-0", "agent-1", "agent-2"], ["agent-3", "agent-4", "agent-5"]]),
])  # fmt: skip
def test_a_pool_rolls_in_batches_never_more_unavailable_than_allowed(
    deployed: Run, cluster: ka.Cluster, api: str, watch: Watch, limit: str,
    runs: list[list[str]],
) -> None:  # fmt: skip
    replace = Batches(cluster)
    roll = roller(deployed, api, replace, watch, pools=POOLS,
                  max_unavailable=MaxUnavailable.parse(limit))  # fmt: skip
    roll.run(rl.plan(NODES, AGENTS, []))
    assert replace.runs == runs
    allowed = len(runs[0])
    assert max(len(down) for down in watch.seen) == allowed
    # Each batch's nodes were replaced only once drained, all back on the pin.
    for name, _, pods in replace.asked:
        assert pods == [], name
    assert all(cluster.nodes[n]["status"]["nodeInfo"]["kubeletVersion"] == PIN for n in AGENTS)


def test_a_node_already_unavailable_counts_against_its_pool(
    deployed: Run, cluster: ka.Cluster, api: str, watch: Watch
) -> None:
    # agent-5, not rolled, is NotReady: with at most 2 of the pool down, one at a time.
    cluster.nodes["agent-5"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    replace = Batches(cluster)
    roll = roller(deployed, api, replace, watch, pools=POOLS,
                  max_unavailable=MaxUnavailable(count=2))  # fmt: skip
    roll.run(rl.plan(NODES, AGENTS[:3], []))
    assert replace.runs == [["agent-0"], ["agent-1"], ["agent-2"]]
    assert max(len(down) for down in watch.seen) == 2


def test_a_pool_at_its_limit_already_is_refused_before_anything_changes(
    deployed: Run, cluster: ka.Cluster, api: str, watch: Watch
) -> None:
    cluster.nodes["agent-4"]["spec"]["unschedulable"] = True
    cluster.nodes["agent-5"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    replace = Batches(cluster)
    roll = roller(deployed, api, replace, watch, pools=POOLS,
                  max_unavailable=MaxUnavailable(count=2))  # fmt: skip
    with pytest.raises(rl.RollError) as caught:
        roll.run(rl.plan(NODES, AGENTS[:2], []))
    assert str(caught.value) == (
        "refused before touching them: pool web has agent-4, agent-5 unavailable, at most 2 "
        "may be (--max-unavailable 2); a node cordoned, not Ready or not registered counts; bring "
        "them back (`raya status`), then roll again; not touched: agent-0, agent-1"
    )
    assert replace.runs == []
    assert not [path for _, method, path in cluster.log if method in ("PATCH", "POST")]


def test_a_blocking_budget_stops_its_batch_untouched_and_a_rerun_finishes(
    deployed: Run, cluster: ka.Cluster, api: str, watch: Watch
) -> None:
    # db-0 on agent-3, a single replica whose budget wants one available: never evictable.
    cluster.pods.append(ka.pod("db-0", "data", "agent-3", owner="StatefulSet"))
    cluster.budgets.append(ka.budget("db", "data", "db", minAvailable=1))
    replace = Batches(cluster)
    roll = roller(deployed, api, replace, watch, pools=POOLS, drain_timeout=120,
                  max_unavailable=MaxUnavailable(count=2))  # fmt: skip
    with pytest.raises(rl.RollError) as caught:
        roll.run(rl.plan(NODES, AGENTS, []))
    assert str(caught.value) == (
        "agent-2, agent-3: drain timed out after 120 s; refused by a PodDisruptionBudget: "
        "data/db-0; agent-2: left cordoned: `kubectl uncordon agent-2`, or roll it again; "
        "agent-3: left cordoned: `kubectl uncordon agent-3`, or roll it again; "
        "rolled: agent-0, agent-1; not touched: agent-4, agent-5"
    )
    # The first batch done; no server of the stopped batch touched; the rest schedulable.
    assert replace.runs == [["agent-0", "agent-1"]]
    assert [cluster.nodes[n]["spec"]["unschedulable"] for n in AGENTS] == [
        False, False, True, True, False, False,
    ]  # fmt: skip
    assert "db-0" in {p["metadata"]["name"] for p in cluster.pods}
    # The budget's owner moves the database away; the roll, run again on what the error
    # names as not rolled, picks up there.
    cluster.budgets.clear()
    roll.run(rl.plan(NODES, ["agent-2", "agent-3", "agent-4", "agent-5"], []))
    assert replace.runs[1:] == [["agent-2", "agent-3"], ["agent-4", "agent-5"]]
    assert max(len(down) for down in watch.seen) == 2
    assert not any(cluster.nodes[n]["spec"]["unschedulable"] for n in AGENTS)


def test_the_command_takes_max_unavailable_and_refuses_a_bad_value(
    project: Path, deployed: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raya.cloud import deploy
    from tests.operate.test_options import Recorded
    from tests.runner import invoke

    roll = Recorded()
    monkeypatch.setattr(rl, "Roll", roll)
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setattr("raya.commands.operate.kube_api_client", lambda text: None)
    given = invoke(["roll", "agent-0", "agent-1", "--root", str(project),
                    "--max-unavailable", "2"])  # fmt: skip
    assert given.exit_code == 0, given.output
    assert given.stdout.splitlines()[-3:-1] == [
        "batches (--max-unavailable 2 of each pool; fewer while nodes of a pool are unavailable):",
        "  1. agent-0, agent-1",
    ]
    # Without it: a tenth of each pool (docs/using.md), at least one.
    invoke(["roll", "agent-0", "--root", str(project)])
    assert [str(built["max_unavailable"]) for built in roll.built] == ["2", "10%"]
    assert roll.built[0]["pools"]["agent-1"] == ""  # the example's list form
    refused = invoke(["roll", "agent-0", "--root", str(project), "--max-unavailable", "0%"])
    assert refused.exit_code == 2
    assert "Invalid value for '--max-unavailable': '0%' is not accepted; accepted: a whole " \
        "number of nodes from 1 (such as 5) or a percentage of each pool from 1% to 100% " \
        "(such as 10%)" in refused.output  # fmt: skip
    assert len(roll.built) == 2


def test_the_command_takes_a_pools_own_limit_from_the_fleet_file(
    project: Path, deployed: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from raya.cloud import deploy
    from tests.operate.test_options import Recorded
    from tests.runner import invoke

    fleet = {"agents": ["cpx21", "cpx21", "cpx21"],
             "pools": [{"name": "web", "type": "cx23", "count": 4, "addresses": "10.0.1.64/27",
                        "maxUnavailable": "50%"}]}  # fmt: skip
    (project / "deploy" / "fleet" / "agents.json").write_text(json.dumps(fleet))
    roll = Recorded()
    monkeypatch.setattr(rl, "Roll", roll)
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed.outputs)
    monkeypatch.setattr("raya.commands.operate.kube_api_client", lambda text: None)
    given = invoke(["roll", "agent-0", "agent-1", "web-0", "web-1", "web-2", "--root",
                    str(project), "--max-unavailable", "1", "--dry-run"])  # fmt: skip
    assert given.exit_code == 0, given.output
    assert given.stdout.splitlines()[-3:] == [
        "batches (--max-unavailable 1 of each pool, 50% of pool web (its maxUnavailable); "
        "fewer while nodes of a pool are unavailable):",
        "  1. agent-0, web-0, web-1",
        "  2. agent-1, web-2",
    ]
    # ...and hands it to the roll, which counts it at each batch.
    rolled = invoke(["roll", "agent-0", "--root", str(project), "--max-unavailable", "1"])
    assert rolled.exit_code == 0, rolled.output
    (built,) = roll.built
    assert built["own_limits"] == {"web": MaxUnavailable(percent=50)}
    assert built["max_unavailable"] == MaxUnavailable(count=1)
