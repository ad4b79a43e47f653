"""The boot scenarios of the control plane's datastore (issue 22), booted together, each on a
network of its own:

- `sqlite`: the example control plane re-created with the current config on the volume of a
  server from before raya ran etcd: raya's ext4 holding k3s' SQLite datastore
  (`db/state.db`, kine's table) with the cluster's objects;
- `rejoin`: three control planes, the two others running the cluster from their volumes
  (each holding its etcd member), and the first re-created with a blank volume, booted once
  both serve: it must join their cluster, not start a second one; refused while its old
  member is in the cluster, then joining once that member is removed;
- `tombstone`: the first control plane re-created on its volume after its member was removed
  from the cluster control-plane-1 runs (its node deleted while its server was gone): k3s
  starts etcd from the volume, finds itself removed and stops; at its next start the guard
  must take the tombstone for a blank volume and join, not let cluster-init start a second
  cluster.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import ClusterSecrets, generate_example_secrets
from raya.nodes.render import K3S_SERVER_DIR
from tests.boot.scenarios import (
    Scenario,
    _k3s_ready,
    _plan,
    ha_cluster,
    render,
    volume_ids,
)
from tests.boot.sim import BootedNode, Fleet, VolumePlan, booted, booted_at_once
from tests.nodes.conftest import VOLUME_ID

DEADLINE = 120.0

# An older server's SQLite datastore, as kine writes it (k3s-io/kine pkg/drivers/sqlite/
# sqlite.go, its schema): one row per revision of a key, a deletion being a row of its own.
KINE_SCHEMA = (
    "CREATE TABLE kine (id INTEGER PRIMARY KEY AUTOINCREMENT, name INTEGER, created INTEGER,"
    " deleted INTEGER, create_revision INTEGER, prev_revision INTEGER, lease INTEGER,"
    " value BLOB, old_value BLOB)"
)
# What the cluster held: 150 ConfigMaps, 40 Secrets and 10 Deployments, each written once;
# ConfigMap cm-7 then updated twice, and Secret s-3 deleted.
OBJECTS = 150, 40, 10
UPDATED = "/registry/configmaps/default/cm-7"
DELETED = "/registry/secrets/default/s-3"
# k3s' own bootstrap key in the datastore, outside /registry/.
BOOTSTRAP = "/bootstrap/0123456789ab"


def written() -> list[tuple[str, str]]:
    """(key, value) rows in the order they were written, deletions excepted."""
    configmaps, secrets, deployments = OBJECTS
    rows = [(f"/registry/configmaps/default/cm-{i}", f"configmap {i} v1")
            for i in range(configmaps)]  # fmt: skip
    rows += [(f"/registry/secrets/default/s-{i}", f"secret {i}") for i in range(secrets)]
    rows += [(f"/registry/deployments/default/d-{i}", f"deployment {i}")
             for i in range(deployments)]  # fmt: skip
    rows += [(UPDATED, "configmap 7 v2"), (UPDATED, "configmap 7 v3"), (BOOTSTRAP, "bootstrap")]
    return rows


def sqlite_datastore() -> bytes:
    """The bytes of a kine SQLite file holding written() and the deletion of DELETED."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state.db"
        with contextlib.closing(sqlite3.connect(path)) as database:
            database.execute(KINE_SCHEMA)
            revisions: dict[str, int] = {}
            for name, value in written():
                database.execute(
                    "INSERT INTO kine (name, created, deleted, create_revision, prev_revision,"
                    " lease, value, old_value) VALUES (?, ?, 0, 0, ?, 0, ?, NULL)",
                    (name, int(name not in revisions), revisions.get(name, 0), value.encode()),
                )
                revisions[name] = revisions.get(name, 0) + 1
            database.execute(
                "INSERT INTO kine (name, created, deleted, create_revision, prev_revision,"
                " lease, value, old_value) VALUES (?, 0, 1, 0, ?, 0, ?, ?)",
                (DELETED, revisions[DELETED], b"", b"secret 3"),
            )
            database.commit()
        return path.read_bytes()


# The cluster the two other control planes run: its id, members (the first's old one still
# among them) and objects, as each of their volumes holds it (tests/boot/standin.py, its
# datastore section).
RUNNING_CLUSTER = "5e1f0c7a9b3d4e2f8a6c1b0d9e7f3a21"
OLD_MEMBER = "control-plane-3f2a1b0c"
RUNNING_MEMBERS = [OLD_MEMBER, "control-plane-1-9d8e7f6a", "control-plane-2-5b4c3d2e"]
RUNNING_KEYS = {f"/registry/configmaps/default/app-{i}": f"app {i}" for i in range(25)}
STORE = "db/etcd/member/standin-store.json"
STORE_PATH = f"{K3S_SERVER_DIR}/{STORE}"
REMOVE_MEMBER = (
    "import json, sys; path, member = sys.argv[1:]; store = json.load(open(path));"
    " store['members'].remove(member); json.dump(store, open(path, 'w'))"
)
DUPLICATE = "duplicate node name found"


def etcd_member(
    member: str, members: list[str] = RUNNING_MEMBERS, keys: dict[str, str] = RUNNING_KEYS
) -> tuple[tuple[str, bytes], ...]:
    """The files of an etcd member of RUNNING_CLUSTER on its volume: the WAL directory k3s
    checks, the member's name (k3s pkg/etcd/etcd.go, `setName`: `db/etcd/name`) and the
    stand-in's store (the cluster's `members` as this member last saw them, its `keys`)."""
    store = {"cluster": RUNNING_CLUSTER, "member": member, "members": members,
             "keys": keys}  # fmt: skip
    return (
        ("db/etcd/member/wal/0000000000000000-0000000000000000.wal", b""),
        ("db/etcd/name", member.encode()),
        (STORE, json.dumps(store).encode()),
    )


@dataclass
class DatastoreBoots:
    sqlite: BootedNode
    rejoin: dict[str, BootedNode]
    rejoin_secrets: ClusterSecrets
    tombstone: dict[str, BootedNode]


def _serving(node: BootedNode) -> bool:
    return any(e.message.startswith("serving https://") for e in node.logged("k3s"))


@contextlib.contextmanager
def boot_datastores() -> Iterator[DatastoreBoots]:
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    current = render(example, generate_example_secrets(node.name for node in example.nodes))
    volume = VolumePlan(VOLUME_ID, holding=(("db/state.db", sqlite_datastore()),))
    sqlite = _plan(current["control-plane"], Scenario("control-plane", "SQLite", volume=volume))

    cluster = ha_cluster()
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    rendered = render(cluster, secrets)
    ids = volume_ids(cluster)
    plans = [
        _plan(rendered[node.name], Scenario(node.name, "rejoin", volume=VolumePlan(
            ids[node.name], holding=etcd_member(member) if k else ())))
        for k, (node, member) in enumerate(zip(cluster.control_planes, RUNNING_MEMBERS,
                                                strict=True))
    ]  # fmt: skip
    plans[0].held = True
    peers = [node.name for node in cluster.control_planes[1:]]

    removed: list[str] = []

    def step(fleet: Fleet) -> None:
        """The first boots once both others serve the cluster; once k3s has refused to join
        while its old member is there, the member goes, as when its node object is deleted
        (k3s pkg/etcd/member_controller.go, `onRemove`, removes the member of a deleted
        node from etcd, which every member then lists without it)."""
        first = fleet.nodes["control-plane"]
        if first.process is None:
            if all(_serving(fleet.nodes[name]) for name in peers):
                fleet.start("control-plane")
        elif not removed and any(DUPLICATE in e.message for e in first.logged("k3s")):
            for name in peers:
                fleet.nodes[name].inside("python3", "-c", REMOVE_MEMBER, STORE_PATH, OLD_MEMBER)
            removed.append(OLD_MEMBER)

    # The first's old member, already removed by the cluster control-plane-1 runs: both
    # volumes list the members without it.
    remaining = RUNNING_MEMBERS[1:]
    removed_plans = [
        _plan(rendered[node.name], Scenario(node.name, "tombstone", volume=VolumePlan(
            ids[node.name], holding=etcd_member(member, remaining))))
        for node, member in zip(cluster.control_planes[:2], RUNNING_MEMBERS, strict=False)
    ]  # fmt: skip
    removed_plans[0].held = True

    def removed_step(fleet: Fleet) -> None:
        """The first boots once control-plane-1 serves the cluster."""
        if fleet.nodes["control-plane"].process is None and _serving(
            fleet.nodes["control-plane-1"]
        ):
            fleet.start("control-plane")

    managers = [
        booted([sqlite], _k3s_ready, DEADLINE),
        booted(plans, _k3s_ready, DEADLINE, step=step),
        booted(removed_plans, _k3s_ready, DEADLINE, step=removed_step),
    ]
    with booted_at_once(managers) as (sqlite_nodes, rejoin_nodes, removed_nodes):
        yield DatastoreBoots(sqlite_nodes["control-plane"], rejoin_nodes, secrets, removed_nodes)
