"""The restore's boot scenarios (issues 23 and 32), shared by tests/boot/test_restore.py and
bench/restore.py (which prints its timings).

A cluster of 1 or 3 control planes and one agent boots from its real rendered configs: each
control plane on a blank volume, or (`blank_first`) the two others from volumes holding the
members of a running cluster and the first, on a blank volume, booted once they serve, so
that its datastore guard joins it to one of them (the drop-in naming that peer). Once every
k3s runs, a snapshot (a datastore of OBJECTS keys, k3s' bootstrap data under the key of the
cluster's token) is put into a real S3 server (moto's, on the host's 127.0.0.1) the way k3s
uploads it, and raya's restore runs against it: the snapshot checked and downloaded by raya,
then each of `restore_plan`'s commands run on its node. raya runs them as root over SSH
(`sudo` as core, `commands/backups.over_ssh`); here the same argv runs as root inside the
node's container (nsenter), with the same stdin, since the simulated nodes have neither FCOS'
sudo nor its authorized_keys.d. The stand-in k3s (tests/boot/standin.py, "etcd restore")
records the reset and the rejoin in the journals.
"""

from __future__ import annotations

import dataclasses
import json
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
from tests.boot.datastore import RUNNING_MEMBERS, etcd_member
from tests.boot.scenarios import Scenario, _k3s_ready, _plan, render, volume_ids
from tests.boot.sim import BootedNode, Fleet, NodePlan, VolumePlan, booted
from tests.boot.standin import key_hash
from tests.operate.s3 import ACCESS_KEY, REGION, SECRET_KEY, ObjectStorage, k3s_upload

# What a small cluster's snapshot weighs (a few MiB: k3s' etcd with its add-ons' objects).
SNAPSHOT_SIZE = 4 * 2**20
# The objects the snapshot holds: ConfigMaps written before it was taken.
OBJECTS = 120
# Each scenario: its control planes, and whether the first came back blank and joined a peer.
CASES = {"1 control plane": (1, False), "3 control planes": (3, False),
         "3, the first blank and joined": (3, True)}  # fmt: skip
FOLDER = "raya"
# Boots on a busy machine, then the restore: its steps and the rejoin.
DEADLINE = 300.0


def snapshot_bytes(join_secret: str, keys: dict[str, str]) -> bytes:
    """An etcd snapshot as the stand-in k3s restores it (tests/boot/standin.py, "etcd
    restore"): the datastore's `keys`, the key its bootstrap data is stored under (that of the
    token it was encrypted with), padded to SNAPSHOT_SIZE with random bytes."""
    body = {"bootstrap": key_hash(join_secret), "keys": keys, "padding": ""}
    room = SNAPSHOT_SIZE - len(json.dumps(body))
    body["padding"] = os.urandom(room // 2).hex()
    return json.dumps(body).encode()


def configmaps(count: int, start: int = 0) -> dict[str, str]:
    return {f"/registry/configmaps/default/cm-{i}": f"configmap {i}"
            for i in range(start, start + count)}  # fmt: skip


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
    control_planes: int, s3: ObjectStorage, blank_first: bool = False
) -> tuple[AbstractContextManager[dict[str, BootedNode]], RestoreRun]:  # fmt: skip
    """The scenario's fleet (to boot with `booted_at_once`) and what its restore records.
    With `blank_first`, the others' volumes hold the members of a running cluster (the
    first's old member already removed from it) holding the snapshot's objects and 30
    written after it, and the first boots blank once they serve."""
    cluster = restore_cluster(control_planes)
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    rendered = render(cluster, secrets)
    volumes = volume_ids(cluster)
    # The members of the running cluster, the first's old one already removed from it.
    members = RUNNING_MEMBERS[1:control_planes]
    keys = {**configmaps(OBJECTS), **configmaps(30, start=OBJECTS)}
    plans: list[NodePlan] = [
        _plan(rendered[node.name], Scenario(node.name, "restore", volume=VolumePlan(
            volumes[node.name],
            holding=etcd_member(member, members, keys) if blank_first and k else ())))
        for k, (node, member) in enumerate(zip(
            cluster.control_planes, RUNNING_MEMBERS[:control_planes], strict=True))
    ]  # fmt: skip
    plans[0].held = blank_first
    plans.append(_plan(rendered["agent-0"], Scenario("agent-0", "restore")))
    first = cluster.control_plane.name
    run = RestoreRun(
        cluster, secrets, f"etcd-snapshot-{first}-{int(time.time()) - 3600}",
        snapshot_bytes(secrets.join_secret, configmaps(OBJECTS)),
    )  # fmt: skip
    bucket = f"restore-{control_planes}-{int(blank_first)}-{os.getpid()}"
    s3.client().create_bucket(Bucket=bucket)
    k3s_upload(s3.endpoint, bucket, FOLDER, run.snapshot, run.data, secrets.join_secret)
    target = Target(
        endpoint=s3.endpoint, bucket=bucket, folder=FOLDER, region=REGION,
        access_key=ACCESS_KEY, secret_key=SECRET_KEY, token_hash=token_hash(secrets.join_secret),
    )  # fmt: skip

    def step(fleet: Fleet) -> None:
        held = fleet.nodes[first]
        if held.process is None:
            if all(_serving(fleet.nodes[node.name]) for node in cluster.control_planes[1:]):
                fleet.start(first)
            return
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


def _serving(node: BootedNode) -> bool:
    return any(e.message.startswith("serving https://") for e in node.logged("k3s"))


def served_again(nodes: Mapping[str, BootedNode], run: RestoreRun) -> dict[str, float]:
    """When each control plane's k3s served its API again after the restore began (host
    monotonic seconds): its stand-in's `serving https://...`, logged once it listens; none
    for one that did not."""
    assert run.booted is not None
    again = {
        name: [node.launched + e.at for e in node.logged("k3s")
               if e.message.startswith("serving https://")]
        for name, node in nodes.items()
        if name in run.control_planes
    }  # fmt: skip
    return {name: times[-1] for name, times in again.items() if times[-1] > run.booted}
