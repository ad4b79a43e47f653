"""`raya roll` of an autoscaled pool (issue 39, item 4): its old servers go in batches,
drained through the eviction API under their PodDisruptionBudgets, deleted through Hetzner's
API, and the cluster autoscaler (tests/operate/autoscaler_double.py, from its 1.36.1 source)
brings new ones from the newest snapshot and the config `raya up` applied. The Kubernetes
stand-in (tests/operate/kube_api.py) and the Hetzner stand-in (tests/cloud/hetzner_api.py) serve
the roll over HTTP; one clock, moved when the roll sleeps, drives them and the autoscaler."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from raya.cloud import deploy
from raya.cloud.image import hcloud_client
from raya.cloud.kubeconfig import api_client
from raya.model.fleet import Fleet, Pool, build_cluster
from raya.model.pins import label_selector
from raya.model.unavailable import MaxUnavailable
from raya.nodes.autoscaler import config_digest, node_config_digests
from raya.operate import autoscaler as au
from raya.operate import roll as rl
from tests.cloud import hetzner_api as standin
from tests.cloud.program.hetzner import Hetzner
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import EXAMPLE, LABELS, provider_mocks, run
from tests.conftest import HetznerApi
from tests.operate import kube_api as ka
from tests.operate.autoscaler_double import (
    Autoscaler,
    cluster_config,
    create_server,
    deployment,
    provider_env,
)
from tests.operate.test_roll import BOOT, OLD, PIN, Clock
from tests.runner import invoke
from tests.support import REPO

TOKEN = "autoscalerToken0" * 4
GROUP = "raya-burst"
MIN, MAX = 3, 5
APPLIED = 1000.0  # when `raya up` applied the pool's config (the stand-in's seconds)
OLD_SNAPSHOT, NEW_SNAPSHOT = 41, 42  # provider_mocks: 42 the newest available x86 one
DEPLOYMENT = au.DEPLOYMENT
DEPLOYMENT_PATH = f"/apis/apps/v1/namespaces/kube-system/deployments/{DEPLOYMENT}"
CHART_VALUES = REPO / "tests" / "data" / "charts" / "cluster-autoscaler-9.59.1.values.excerpt.yaml"


def moment(seconds: float) -> str:
    return (ka.EPOCH + datetime.timedelta(seconds=seconds)).isoformat()


@pytest.fixture(scope="module")
def deployed_pool() -> Run:
    burst = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"),
                 min_size=MIN, max_size=MAX)  # fmt: skip
    fleet = build_cluster(EXAMPLE.config, Fleet(agents=("cx23",), pools=(burst,)), "fleet")
    return run(provider_mocks(), fleet, autoscaler_token=TOKEN)


def stack_secret(deployed_pool: Run) -> dict[str, Any]:
    documents = yaml.safe_load_all(deployed_pool.outputs["autoscaler"])
    return next(d for d in documents if d["kind"] == "Secret")


@dataclass
class Seen:
    """What the clock saw at each wait of the roll."""

    web_ready: list[int] = field(default_factory=list)  # the budget's pods Ready, not leaving
    pool_up: list[int] = field(default_factory=list)  # the group's nodes Ready, schedulable
    unannotated_cordons: list[str] = field(default_factory=list)


class Watch(Clock):
    """The roll's clock: each wait lets the stand-ins and the autoscaler act, and notes what
    it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.kube: ka.Cluster | None = None
        self.hetzner: Hetzner | None = None
        self.autoscaler: Autoscaler | None = None
        self.seen = Seen()

    def _sleep(self, seconds: float) -> None:
        super()._sleep(seconds)
        assert self.kube and self.hetzner and self.autoscaler
        with self.kube.lock:
            self.hetzner.settle()
            self.kube.settle()
            self.autoscaler.tick()
            self.kube.settle()
            self.look(self.kube)

    def look(self, kube: ka.Cluster) -> None:
        self.seen.web_ready.append(sum(
            1 for p in kube.pods
            if p["metadata"]["labels"].get("app") == "web" and ka._ready(p)
            and not p["metadata"].get("deletionTimestamp")
        ))  # fmt: skip
        assert self.autoscaler is not None
        names = {s.name for s in self.autoscaler.servers()}
        group = [node for name, node in kube.nodes.items() if name in names]
        self.seen.pool_up.append(sum(
            1 for node in group if ka._node_ready(node) and not node["spec"].get("unschedulable")
        ))  # fmt: skip
        self.seen.unannotated_cordons += [
            node["metadata"]["name"] for node in group
            if node["spec"].get("unschedulable")
            and node["metadata"].get("annotations", {}).get(au.SCALE_DOWN_DISABLED) != "true"
        ]  # fmt: skip


@dataclass
class Scene:
    watch: Watch
    kube: ka.Cluster
    hetzner: Hetzner
    autoscaler: Autoscaler
    kube_url: str
    hetzner_url: str
    deployed: Run
    old: list[str]
    lines: list[str] = field(default_factory=list)

    def roll(self, max_unavailable: str = "1", **kwargs: Any) -> au.PoolRoll:
        kubeconfig = self.deployed.outputs["kubeconfig"]
        kwargs.setdefault("stack_secret", stack_secret(self.deployed))
        kwargs.setdefault("selector", label_selector(LABELS))
        kwargs.setdefault("min_size", MIN)
        kwargs.setdefault("hetzner", hcloud_client(standin.TOKEN, self.hetzner_url))
        return au.PoolRoll(
            kube=rl.Kubernetes(api_client(kubeconfig, server=self.kube_url)),
            api=api_client(kubeconfig, server=self.kube_url),
            kubelet_version=PIN, say=self.lines.append, clock=self.watch,
            pool_name="burst", group=GROUP, ready_timeout=900.0,
            max_unavailable=MaxUnavailable.parse(max_unavailable), **kwargs,
        )  # fmt: skip

    def deletions(self) -> list[str]:
        return [r.removeprefix("delete ") for r in self.hetzner.requests if r.startswith("delete ")]

    def touched(self) -> list[tuple[float, str, str]]:
        """What raya changed through the Kubernetes API."""
        return [entry for entry in self.kube.log if entry[1] in ("PATCH", "POST", "DELETE")]


def make_scene(
    deployed: Run, kube_url_of: Any, hetzner_api: HetznerApi, monkeypatch: pytest.MonkeyPatch,
    *, created: float, image: int,
) -> Iterator[Scene]:  # fmt: skip
    watch = Watch()
    watch.t = APPLIED
    model = Hetzner()
    model.delete_seconds = 0.0
    kube = ka.Cluster(
        nodes={"control-plane": ka.node_object("control-plane", PIN, unschedulable=True)},
        clock=watch.now, boot=BOOT,
    )  # fmt: skip
    model.on_delete = kube.server_deleted
    old = [f"{GROUP}-a{i}" for i in range(MIN)]
    # Made by the autoscaler from the config raya deployed (its Secret: `HCLOUD_CLUSTER_CONFIG`).
    provider_config = cluster_config(stack_secret(deployed)["stringData"]["cluster-config"])
    env = provider_env(deployed.outputs["autoscaler"])
    for i, name in enumerate(old):
        server = create_server(model, provider_config, env, GROUP, name, (f"10.0.16.{i + 2}",))
        server.image, server.created, server.server_type = image, moment(created), "cpx31"
        kube.nodes[name] = ka.node_object(name, OLD, server=server.id)
        # A Deployment's web pods, one a node, under a budget keeping two; and a DaemonSet's.
        kube.pods.append(ka.pod(f"web-{i}", "default", name, controller="web"))
        kube.pods.append(ka.pod(f"flannel-{i}", "kube-system", name, owner="DaemonSet"))
    kube.budgets.append(ka.budget("web", "default", "web", minAvailable=2))
    monkeypatch.setattr(standin, "MODEL", model)
    monkeypatch.setattr(standin, "SNAPSHOTS", provider_mocks().snapshots)
    with kube_url_of(kube) as url:
        client = api_client(deployed.outputs["kubeconfig"], server=url)
        au.apply(client, deployed.outputs["autoscaler"], watch, lambda _: None,
                 now=lambda: ka.EPOCH + datetime.timedelta(seconds=APPLIED))  # fmt: skip
        client.close()
        document = au._cluster_config(stack_secret(deployed))
        kube.objects[DEPLOYMENT_PATH] = deployment(config_digest(document))
        double = Autoscaler(kube, model, provider_mocks().snapshots, GROUP, MIN, MAX, PIN,
                            env=env, unneeded_time=60.0)  # fmt: skip
        double.start()
        double._scan_at = APPLIED
        watch.kube, watch.hetzner, watch.autoscaler = kube, model, double
        kube.log.clear()
        yield Scene(watch, kube, model, double, url, hetzner_api.url, deployed, old)


@pytest.fixture
def kube_url_of(deployed_pool: Run, tmp_path: Path) -> Any:
    return lambda kube: ka.deployment_api(kube, deployed_pool.resources, tmp_path)


@pytest.fixture
def old_pool(
    deployed_pool: Run, kube_url_of: Any, hetzner_api: HetznerApi,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Scene]:  # fmt: skip
    """Three servers made before the config was applied, from an older snapshot."""
    yield from make_scene(deployed_pool, kube_url_of, hetzner_api, monkeypatch,
                          created=APPLIED - 500, image=OLD_SNAPSHOT)  # fmt: skip


@pytest.fixture
def current_pool(
    deployed_pool: Run, kube_url_of: Any, hetzner_api: HetznerApi,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Scene]:  # fmt: skip
    """Three servers made after the config was applied, from the newest snapshot."""
    yield from make_scene(deployed_pool, kube_url_of, hetzner_api, monkeypatch,
                          created=APPLIED + 100, image=NEW_SNAPSHOT)  # fmt: skip


@pytest.mark.parametrize("limit", [1, 2])
def test_the_old_servers_go_in_batches_under_the_budget_and_come_back_new(
    old_pool: Scene, limit: int
) -> None:
    scene = old_pool
    roll = scene.roll(str(limit))
    steps = roll.prepare()
    assert [step.node for step in steps] == scene.old
    roll.run(steps)
    # Every old server deleted through Hetzner's API, by raya; none left.
    assert sorted(scene.deletions()) == scene.old
    assert not set(scene.old) & {s.name for s in scene.hetzner.servers.values()}
    assert not set(scene.old) & set(scene.kube.nodes)
    # The autoscaler brought three new ones back, each from the newest snapshot and the node
    # config `raya up` applied; it deleted none itself (the batch was kept from it).
    applied = node_config_digests(au._cluster_config(stack_secret(scene.deployed)))[GROUP]
    assert len(scene.autoscaler.made) == 3
    assert {(digest, image) for _, digest, image in scene.autoscaler.made} == {
        (applied, NEW_SNAPSHOT)
    }
    assert scene.autoscaler.deleted == []
    new = {name for name, _, _ in scene.autoscaler.made}
    assert all(ka._node_ready(scene.kube.nodes[name]) for name in new)
    # Labelled as 1.36.1 labels them: the group's, and the pool's server labels raya set.
    assert {tuple(sorted(scene.hetzner.server_named(name).labels.items()))  # type: ignore[union-attr]
            for name in new} == {(("hcloud/node-group", GROUP), ("managed_by", "raya"),
                                  ("pool", "burst"), ("role", "agent"))}  # fmt: skip
    # The budget (two of the three web pods) held at every moment, and the pool never had
    # more than `limit` of its three nodes down; a batch took `limit` nodes at once.
    assert min(scene.watch.seen.web_ready) == 2
    evictions = [path for _, method, path in scene.kube.log if method == "POST"]
    assert len(evictions) > len(set(evictions))  # the budget refused some (429), asked again
    assert min(scene.watch.seen.pool_up) == MIN - limit
    assert scene.watch.seen.unannotated_cordons == []
    batches = [line for line in scene.lines if line.startswith("[")]
    assert batches[0] == f"[0/3 rolled, 0:00:00 elapsed, {3 - limit} after these] " + ", ".join(
        scene.old[:limit]
    )
    assert max(len(line.split("] ")[1].split(", ")) for line in batches) == limit
    assert len(batches) == -(-3 // limit)
    # The autoscaler restarted once per batch, counting its servers again.
    assert len(scene.autoscaler.starts) == 1 + len(batches)
    assert f"{scene.old[0]}: old (image {OLD_SNAPSHOT}, the newest snapshot is 42)" in scene.lines
    assert any(line.startswith("pool burst: 3 servers, every one Ready on") for line in scene.lines)


def test_an_up_to_date_pool_is_left_alone(current_pool: Scene) -> None:
    scene = current_pool
    roll = scene.roll()
    assert roll.prepare() == []
    assert scene.lines == [
        f"pool burst: current, left alone: {', '.join(scene.old)} (the newest snapshot, "
        "created after its config was applied)"
    ]
    assert scene.deletions() == [] and scene.touched() == []


def test_a_server_made_before_the_config_was_applied_is_old(current_pool: Scene) -> None:
    scene = current_pool
    server = scene.hetzner.server_named(scene.old[1])
    assert server is not None
    server.created = moment(APPLIED - 1)
    steps = scene.roll().prepare()
    assert [step.node for step in steps] == [scene.old[1]]
    assert (
        f"{scene.old[1]}: old (created 2026-12-01T00:16:39Z, before its config was applied "
        "(2026-12-01T00:16:40Z))"
    ) in scene.lines


def refused(scene: Scene, match: str, **kwargs: Any) -> None:
    with pytest.raises(rl.RollError, match=match):
        scene.roll(**kwargs).prepare()
    assert scene.deletions() == [] and scene.touched() == []


def test_a_config_raya_up_has_not_applied_is_refused(old_pool: Scene) -> None:
    secret = stack_secret(old_pool.deployed)
    document = au._cluster_config(secret)
    document["nodeConfigs"][GROUP]["labels"] = {"tier": "new"}
    encoded = base64.b64encode(json.dumps(document).encode()).decode()
    changed = {**secret, "stringData": {**secret["stringData"], "cluster-config": encoded}}
    refused(old_pool, r"Secret in the cluster is not the one the last `raya up` computed "
            r"\(node group raya-burst\): run `raya up`", stack_secret=changed)  # fmt: skip


def test_new_pins_without_raya_up_are_refused(old_pool: Scene) -> None:
    refused(old_pool, r"selects other snapshots than the pins now .*: run `raya up`",
            selector="managed_by=raya,os=fcos")  # fmt: skip


def test_an_autoscaler_not_rolled_out_is_refused(old_pool: Scene) -> None:
    status = old_pool.kube.objects[DEPLOYMENT_PATH]["status"]
    status.update(updatedReplicas=0, replicas=2)
    refused(old_pool, r"the cluster autoscaler is not ready \(0 of 1 replicas updated\)")


def test_an_autoscaler_on_another_config_is_refused(old_pool: Scene) -> None:
    template = old_pool.kube.objects[DEPLOYMENT_PATH]["spec"]["template"]
    template["metadata"]["annotations"]["raya/cluster-config-sha256"] = "0" * 64
    refused(old_pool, r"does not run with the config `raya up` applied yet")


def test_a_node_the_autoscaler_is_deleting_stops_the_roll(old_pool: Scene) -> None:
    scene = old_pool
    node = scene.kube.nodes[scene.old[0]]
    node["spec"]["taints"] = [{"key": au.TO_BE_DELETED, "effect": "NoSchedule"}]
    roll = scene.roll()
    with pytest.raises(rl.RollError, match="the cluster autoscaler is deleting it already"):
        roll.run(roll.prepare())
    assert scene.deletions() == []
    assert not node["spec"].get("unschedulable")


def test_stamps_keep_the_moment_a_config_was_first_applied() -> None:
    first = datetime.datetime(2026, 12, 1, 10, tzinfo=datetime.UTC)
    later = first + datetime.timedelta(hours=5)
    stamped = au.stamps({"raya-burst": "aaaa", "raya-arm": "bbbb"}, {}, first)
    assert stamped == {
        "raya/node-config.raya-burst": "aaaa 2026-12-01T10:00:00Z",
        "raya/node-config.raya-arm": "bbbb 2026-12-01T10:00:00Z",
    }
    again = au.stamps({"raya-burst": "aaaa", "raya-arm": "cccc"}, stamped, later)
    assert again == {
        "raya/node-config.raya-burst": "aaaa 2026-12-01T10:00:00Z",
        "raya/node-config.raya-arm": "cccc 2026-12-01T15:00:00Z",
    }
    assert au.applied_since(again, "raya-arm") == ("cccc", later)
    assert au.applied_since(again, "raya-gone") == ("", au.EARLIEST)
    with pytest.raises(Exception, match="at most 63 characters"):
        au.stamps({"g" * 52: "aaaa"}, {}, first)


def test_raya_up_stamps_the_secret_and_keeps_the_moment_of_an_unchanged_config(
    old_pool: Scene,
) -> None:
    path = "/api/v1/namespaces/kube-system/secrets/raya-cluster-autoscaler"
    stamped = {"raya/node-config.raya-burst": stamp_of(old_pool, APPLIED)}
    assert old_pool.kube.objects[path]["metadata"]["annotations"] == stamped
    client = api_client(old_pool.deployed.outputs["kubeconfig"], server=old_pool.kube_url)
    au.apply(client, old_pool.deployed.outputs["autoscaler"], old_pool.watch, lambda _: None,
             now=lambda: ka.EPOCH + datetime.timedelta(days=3))  # fmt: skip
    client.close()
    assert old_pool.kube.objects[path]["metadata"]["annotations"] == stamped


def stamp_of(scene: Scene, seconds: float) -> str:
    """The stamp of the stack's node config for the group, applied at `seconds`."""
    digest = node_config_digests(au._cluster_config(stack_secret(scene.deployed)))[GROUP]
    assert len(digest) == 16
    return f"{digest} {(ka.EPOCH + datetime.timedelta(seconds=seconds)):%Y-%m-%dT%H:%M:%SZ}"


def test_the_command_rolls_a_pool_named_and_prints_its_plan_first(
    old_pool: Scene, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scene = old_pool
    (project / "deploy" / "fleet" / "agents.json").write_text(json.dumps({
        "agents": ["cx23"],
        "pools": [{"name": "burst", "type": "cpx31", "min": MIN, "max": MAX,
                   "addresses": "10.0.16.0/24"}],
    }))  # fmt: skip
    runs: list[str] = []
    monkeypatch.setattr(deploy, "run", lambda action, *_, **__: runs.append(action))
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: scene.deployed.outputs)
    monkeypatch.setattr("raya.commands.operate.kube_api_client",
                        lambda text: api_client(text, server=scene.kube_url))  # fmt: skip
    monkeypatch.setattr(rl, "Clock", lambda: scene.watch)
    dry = invoke(["roll", "burst", "--root", str(project), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines()[0] == "pool burst (autoscaled), each old server:"
    assert dry.stdout.splitlines()[3] == (
        "  3. annotate it cluster-autoscaler.kubernetes.io/scale-down-disabled, so that the "
        "autoscaler's own scale-down never picks it meanwhile (refused if the autoscaler is "
        "deleting it already)"
    )
    assert dry.stdout.splitlines()[-1] == (
        "  its old servers (not from the newest snapshot, or made before `raya up` applied its "
        "config) are found when the roll starts; batches of 10% of its servers"
    )
    assert scene.deletions() == [] and scene.touched() == [] and runs == []
    result = invoke(["roll", "burst", "--root", str(project)])
    assert result.exit_code == 0, result.output
    assert runs == []  # no preview, no engine run: the pool's servers are the autoscaler's
    assert "pool burst: rolled 3 server(s)" in result.stdout
    assert sorted(scene.deletions()) == scene.old
    assert "[0/3 rolled, 0:00:00 elapsed, 2 after these] raya-burst-a0" in result.stderr
    monkeypatch.delenv("HCLOUD_TOKEN")
    refused = invoke(["roll", "burst", "--root", str(project)])
    assert refused.exit_code != 0
    assert "rolling an autoscaled pool needs HCLOUD_TOKEN" in refused.output


def test_a_pool_at_min_zero_waits_for_the_pods_it_displaced(old_pool: Scene) -> None:
    # No budget, all three at once, min 0: once restarted, the autoscaler makes a server only
    # for the pods left pending (at its first scan, 10 s after it starts), and the roll waits
    # until they have a node again.
    scene = old_pool
    scene.kube.budgets.clear()
    scene.autoscaler.min_size = 0
    scene.autoscaler.max_size = 3  # at max while draining: it cannot add a node then
    roll = scene.roll("3", min_size=0)
    roll.run(roll.prepare())
    assert sorted(scene.deletions()) == scene.old
    (made,) = [name for name, _, _ in scene.autoscaler.made]
    web = [p for p in scene.kube.pods if p["metadata"]["labels"].get("app") == "web"]
    assert len(web) == 3 and all(p["spec"]["nodeName"] == made for p in web)
    assert scene.lines[-1].startswith("pool burst: 1 servers, every one Ready on")


def test_the_autoscaler_replaces_a_server_deleted_behind_its_back_for_pending_pods(
    old_pool: Scene,
) -> None:
    # The autoscaler 1.36.1 (`clusterstate.go`, `GetUpcomingNodes`, since commit 251652c2ee)
    # counts a group's missing nodes as upcoming only while its own scale-up is active: a
    # server deleted behind its back, its target unchanged, no longer holds back a pending
    # pod (1.35.0 took the missing node for one coming, until --max-node-provision-time).
    scene = old_pool
    for name in scene.old:  # no room on the nodes left: the pod stays pending
        scene.kube.nodes[name]["spec"]["unschedulable"] = True
    gone = scene.hetzner.server_named(scene.old[0])
    assert gone is not None
    scene.hetzner.delete_server(gone.id)
    scene.kube.pods.append(ka.pod("job-0", "default", ""))
    scene.watch._sleep(30.0)  # three scans, no restart
    assert len(scene.autoscaler.starts) == 1
    (made,) = [name for name, _, _ in scene.autoscaler.made]
    assert made.startswith(f"{GROUP}-") and scene.hetzner.server_named(made) is not None


def test_a_server_the_autoscaler_makes_from_an_old_snapshot_stops_the_roll(
    old_pool: Scene,
) -> None:
    # The autoscaler does not see snapshot 42 (say, its token is another project's): it makes
    # the new server from 41, which the roll refuses to take for a replacement.
    scene = old_pool
    scene.autoscaler.snapshots = [s for s in scene.autoscaler.snapshots if s.id != NEW_SNAPSHOT]
    roll = scene.roll()
    with pytest.raises(rl.RollError, match=(
        rf"the autoscaler made {GROUP}-[0-9a-f]+ from an old config or image \(image 41, the "
        r"newest snapshot is 42\)"
    )) as error:  # fmt: skip
        roll.run(roll.prepare())
    assert f"not touched: {scene.old[1]}, {scene.old[2]}" in str(error.value)


def test_an_autoscaler_that_does_not_come_back_from_its_restart_stops_the_roll(
    old_pool: Scene,
) -> None:
    # Its new pod never starts (an image it cannot pull, say): the first batch's server is
    # gone, and the roll stops there, 900 s (the scene's ready_timeout) after the restart,
    # rather than take the next node while nothing would bring the pool back.
    scene = old_pool
    scene.autoscaler.restart_seconds = float("inf")
    roll = scene.roll()
    with pytest.raises(rl.RollError, match=(
        r"the cluster autoscaler not back 900 s after its restart \(.*replicas updated\)"
    )) as error:  # fmt: skip
        roll.run(roll.prepare())
    assert scene.deletions() == [scene.old[0]]
    assert f"not touched: {scene.old[1]}, {scene.old[2]}" in str(error.value)


def test_a_hetzner_refusal_is_named_before_anything_is_touched(old_pool: Scene) -> None:
    roll = old_pool.roll(hetzner=hcloud_client("x" * 64, old_pool.hetzner_url))
    with pytest.raises(rl.RollError, match=r"^Hetzner API: listing node group raya-burst: "):
        roll.prepare()
    assert old_pool.deletions() == [] and old_pool.touched() == []


def test_the_autoscaler_brings_a_pool_under_its_min_back_to_it(deployed_pool: Run) -> None:
    # `--enforce-node-group-min-size=true` (the chart renders each `extraArgs` entry as
    # `--<key>=<value>`, merged into its own defaults, which the chart's values declare).
    documents = yaml.safe_load_all(deployed_pool.outputs["autoscaler"])
    chart = next(d for d in documents if d["kind"] == "HelmChart")
    values = yaml.safe_load(chart["spec"]["valuesContent"])
    assert values["extraArgs"] == {"enforce-node-group-min-size": True}
    excerpt = yaml.safe_load(CHART_VALUES.read_text())
    assert excerpt["extraArgs"] == {"logtostderr": True, "stderrthreshold": "info", "v": 4}
