"""The restore's boot scenario (issue 23), shared by tests/boot/test_restore.py and
bench/restore.py (which prints its timings).

A cluster of 1 or 3 control planes (each on a blank volume) and one agent boots from its real
rendered configs; once every k3s runs, a snapshot is put into a real S3 server (moto's, on
the host's 127.0.0.1) the way k3s uploads it, and raya's restore runs against it: the
snapshot checked and downloaded by raya, then each of `restore_plan`'s commands run on its
node. raya runs them as root over SSH (`sudo` as core, `commands/backups.over_ssh`); here the
same argv runs as root inside the node's container (nsenter), with the same stdin, since the
simulated nodes have neither FCOS' sudo nor its authorized_keys.d. The stand-in k3s
(tests/boot/standin.py, "etcd restore") records the reset and the rejoin in the journals.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO, Any

from raya.commands.backups import restore_snapshot
from raya.model.fleet import Cluster, build_cluster
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import ClusterSecrets, generate_example_secrets, token_hash
from raya.operate.backups import Target
from tests.boot.balancer import Balancer
from tests.boot.scenarios import Scenario, _k3s_ready, _plan, render, volume_ids
from tests.boot.sim import BootedNode, Fleet, NodePlan, VolumePlan, booted
from tests.operate.s3 import ACCESS_KEY, REGION, SECRET_KEY, ObjectStorage, k3s_upload

# What a small cluster's snapshot weighs (a few MiB: k3s' etcd with its add-ons' objects).
SNAPSHOT_SIZE = 4 * 2**20
FOLDER = "raya"
# Boots on a busy machine, then the restore: its steps and the rejoin.
DEADLINE = 300.0


def restore_cluster(control_planes: int) -> Cluster:
    """The example cluster with `control_planes` control planes and one agent."""
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    config = dataclasses.replace(example.config, control_planes=control_planes)
    return build_cluster(config, ("cx23",), "the restore boot scenario")


@dataclass
class Ran:
    """One command raya's restore ran on a node: when (host monotonic seconds), what, how."""

    node: str
    started: float
    ended: float
    command: tuple[str, ...]
    code: int
    printed: str


@dataclass
class RestoreRun:
    """What the scenario did and saw; `error` is the restore's failure, if any."""

    cluster: Cluster
    secrets: ClusterSecrets
    snapshot: str
    data: bytes
    ran: list[Ran] = field(default_factory=list)
    booted: float | None = None  # when every k3s ran (host monotonic seconds)
    checked: float | None = None  # the snapshot checked and downloaded: the first command next
    done: float | None = None
    error: str | None = None

    @property
    def control_planes(self) -> list[str]:
        return [node.name for node in self.cluster.control_planes]


def _runner(nodes: Mapping[str, BootedNode], run: RestoreRun) -> Callable[
    [Mapping[str, Any], Sequence[str], IO[bytes] | None], tuple[int, str]
]:  # fmt: skip
    """raya's `Remote` for the simulated nodes: the argv as root in the node's container."""

    def remote(
        entry: Mapping[str, Any], command: Sequence[str], stdin: IO[bytes] | None
    ) -> tuple[int, str]:
        node = nodes[str(entry["name"])]
        if run.checked is None:
            run.checked = time.monotonic()
        started = time.monotonic()
        done = subprocess.run(
            ["nsenter", "-t", str(node.leader()), "-a", *command],
            stdin=stdin or subprocess.DEVNULL, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        printed = (done.stdout + done.stderr).decode(errors="replace")
        run.ran.append(
            Ran(node.plan.name, started, time.monotonic(), tuple(command), done.returncode, printed)
        )
        return done.returncode, printed

    return remote


def restore_group(
    control_planes: int, s3: ObjectStorage
) -> tuple[AbstractContextManager[dict[str, BootedNode]], RestoreRun]:
    """The scenario's fleet (to boot with `booted_at_once`) and what its restore records."""
    cluster = restore_cluster(control_planes)
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    rendered = render(cluster, secrets)
    volumes = volume_ids(cluster)
    plans: list[NodePlan] = [
        _plan(rendered[node.name],
              Scenario(node.name, "restore", volume=VolumePlan(volumes[node.name])))
        for node in cluster.control_planes
    ]  # fmt: skip
    plans.append(_plan(rendered["agent-0"], Scenario("agent-0", "restore")))
    first = cluster.control_plane.name
    run = RestoreRun(
        cluster, secrets, f"etcd-snapshot-{first}-{int(time.time()) - 3600}",
        os.urandom(SNAPSHOT_SIZE),
    )  # fmt: skip
    bucket = f"restore-{control_planes}-{os.getpid()}"
    s3.client().create_bucket(Bucket=bucket)
    k3s_upload(s3.endpoint, bucket, FOLDER, run.snapshot, run.data, secrets.join_secret)
    target = Target(
        endpoint=s3.endpoint, bucket=bucket, folder=FOLDER, region=REGION,
        access_key=ACCESS_KEY, secret_key=SECRET_KEY, token_hash=token_hash(secrets.join_secret),
    )  # fmt: skip

    def step(fleet: Fleet) -> None:
        if run.booted is not None or not all(map(_k3s_ready, fleet.nodes.values())):
            return
        run.booted = time.monotonic()
        servers = {name: {"name": name} for name in fleet.nodes}
        try:
            restore_snapshot(
                run.snapshot, run.control_planes, servers, target, True, _runner(fleet.nodes, run)
            )
        except Exception as error:  # the test reports it, with the journals at hand
            run.error = f"{type(error).__name__}: {error}"
        run.done = time.monotonic()

    balancer = None
    if control_planes > 1:
        balancer = Balancer(
            cluster.config.registration_ip, 6443, [n.private_ip for n in cluster.control_planes]
        )
    fleet = booted(
        plans, lambda node: run.done is not None, DEADLINE, balancer=balancer, step=step
    )
    return fleet, run
