"""The control plane's datastore across a re-created server (issue 22), booted: an older
server's SQLite datastore moves into etcd with nothing lost, and a first control plane with a
blank volume, or with the datastore of a member the cluster removed, joins the cluster its
peers run instead of starting a second one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.boot.datastore import (
    BOOTSTRAP,
    DELETED,
    OLD_MEMBER,
    RUNNING_CLUSTER,
    RUNNING_KEYS,
    RUNNING_MEMBERS,
    STORE,
    UPDATED,
    DatastoreBoots,
    boot_datastores,
    written,
)
from tests.boot.sim import BootedNode
from tests.support import require_root, require_tool

JOIN_DROPIN = "etc/rancher/k3s/config.yaml.d/40-raya-join.yaml"


@pytest.fixture(scope="module")
def boots() -> Iterator[DatastoreBoots]:
    for tool in ("debootstrap", "systemd-nspawn", "ip", "dnsmasq", "nsenter", "journalctl",
                 "losetup", "mkfs.ext4", "blkid"):  # fmt: skip
        require_tool(tool)
    require_root("the boot tests (namespaces, mounts, nspawn, loop devices)")
    with boot_datastores() as booted:
        yield booted


def _messages(node: BootedNode, identifier: str) -> list[str]:
    return [event.message for event in node.logged(identifier)]


def _store(node: BootedNode) -> dict[str, Any]:
    assert node.volume is not None
    loaded = json.loads(node.volume.files()[STORE])
    assert isinstance(loaded, dict)
    return loaded


def test_a_sqlite_datastore_moves_into_etcd_with_nothing_lost(boots: DatastoreBoots) -> None:
    """The server re-created with `cluster-init` on the volume of a server that ran SQLite:
    the volume is kept as it is, the guard leaves k3s to start from it, and k3s' etcd ends
    holding every object: 150 ConfigMaps, 40 Secrets and 10 Deployments less the deleted
    Secret, the updated ConfigMap at its last value; k3s' own bootstrap key, outside
    /registry/, is not carried over (k3s writes it anew at start)."""
    node = boots.sqlite
    assert node.volume is not None
    files = node.volume.files()
    assert "db/state.db" not in files
    # The SQLite file, renamed as it was: k3s keeps it, as the record of what it moved.
    assert node.plan.volume is not None
    assert files["db/state.db.migrated"] == dict(node.plan.volume.holding)["db/state.db"]
    expected = {name: value for name, value in written() if name.startswith("/registry/")}
    del expected[DELETED]
    assert len(expected) == 150 + 40 + 10 - 1
    assert expected[UPDATED] == "configmap 7 v3"
    keys = _store(node)["keys"]
    assert keys == expected
    assert BOOTSTRAP not in keys
    # How: the volume kept, the guard leaving k3s as configured, k3s converting.
    assert any("holds raya's filesystem" in m and "keeping it" in m
               for m in _messages(node, "raya-k3s-volume"))  # fmt: skip
    (decision,) = _messages(node, "raya-k3s-datastore")
    assert "holds a datastore: k3s starts from it as configured" in decision
    log = _messages(node, "k3s")
    assert "etcd: cluster-init, starting a new cluster" in log
    assert not [m for m in log if m.startswith("joined")]
    assert "etcd: 199 keys under /registry/ migrated from /var/lib/rancher/k3s/server/db/" \
        "state.db, now /var/lib/rancher/k3s/server/db/state.db.migrated" in log
    assert node.state["failed"] == []


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_first_control_plane_with_a_blank_volume_joins_the_running_cluster(
    boots: DatastoreBoots,
) -> None:
    nodes, secrets = boots.rejoin, boots.rejoin_secrets
    for name, member in zip(("control-plane-1", "control-plane-2"), RUNNING_MEMBERS[1:],
                            strict=True):  # fmt: skip
        log = _messages(nodes[name], "k3s")
        assert any(m.startswith(f"etcd: starting member {member} of cluster {RUNNING_CLUSTER}")
                   for m in log), log  # fmt: skip
        assert not [m for m in log if "cluster-init" in m and "ignored" not in m]

    first = nodes["control-plane"]
    log = _messages(first, "k3s")
    # One cluster: the first started none of its own, and ended in theirs.
    assert "etcd: cluster-init, starting a new cluster" not in log
    assert not [m for m in log if m.startswith("etcd: cluster ")]
    assert _store(first)["cluster"] == RUNNING_CLUSTER
    # Decided before each start of k3s, each time a join: the volume stays blank until k3s
    # has joined; the drop-in is the last decision's.
    decisions = _messages(first, "raya-k3s-datastore")
    assert all("holds no datastore and 10.0.1.1" in d for d in decisions), decisions
    decision = decisions[-1]
    peer = decision.split(" and ")[1].split()[0]
    assert peer in ("10.0.1.11", "10.0.1.12"), decision
    assert f"k3s joins it (server: https://{peer}:6443) instead of starting a new one" in decision
    assert any('"cluster-init": false' in m and f'"server": "https://{peer}:6443"' in m
               for m in log if m.startswith("config: "))  # fmt: skip
    # It joined the peer with the full server token, and holds the running cluster's data.
    token = f"K10{_sha256(secrets.server_ca.cert_pem)}::server:{secrets.join_secret}"
    assert f"token sha256: {_sha256(token)}" in log
    joins = [m for m in log if m.startswith(f"joined https://{peer}:6443 as a server: welcome")]
    # Refused while its old member was in the cluster, k3s tried again (its unit restarts it)
    # with the same config, never starting a cluster of its own, and joined once it was gone.
    refusal = "etcd: ETCD join failed: duplicate node name found, please use a unique name " \
        "for this node"
    assert refusal in log and len(joins) >= 2
    assert len(decisions) >= 2
    store = _store(first)
    assert store["cluster"] == RUNNING_CLUSTER
    assert store["keys"] == RUNNING_KEYS
    member = str(store["member"])
    assert member.startswith("control-plane-")
    assert member != OLD_MEMBER
    assert store["members"] == [*(m for m in RUNNING_MEMBERS if m != OLD_MEMBER), member]
    joined = f"etcd: member {member} joined cluster {RUNNING_CLUSTER} (25 keys)"
    assert log.index(refusal) < log.index(joined)
    dropin = (first.root / JOIN_DROPIN).read_text()
    assert dropin.endswith(f'cluster-init: false\ntoken: "{token}"\n'
                           f'server: "https://{peer}:6443"\n')  # fmt: skip
    assert (first.root / JOIN_DROPIN).stat().st_mode & 0o777 == 0o600
    assert first.state["failed"] == []


def test_a_first_control_plane_removed_from_etcd_rejoins_at_its_next_start(
    boots: DatastoreBoots,
) -> None:
    """Its volume holds its member, which the cluster removed: k3s starts etcd from it, finds
    itself removed, writes the tombstone and stops; before k3s' next start the guard takes
    the tombstone for a blank volume and joins control-plane-1, where cluster-init alone
    would have started a second cluster."""
    first = boots.tombstone["control-plane"]
    decisions = _messages(first, "raya-k3s-datastore")
    assert len(decisions) == 2, decisions
    assert "holds a datastore: k3s starts from it as configured" in decisions[0]
    assert (
        "holds the etcd datastore of a member removed from the cluster "
        "(/var/lib/rancher/k3s/server/db/etcd/tombstone) and 10.0.1.11 serves this cluster: "
        "k3s joins it (server: https://10.0.1.11:6443) instead of starting a new one"
    ) in decisions[1]
    log = _messages(first, "k3s")
    removed = (f"etcd: member {OLD_MEMBER} has been removed from the cluster; tombstone "
               "written: restart k3s to rejoin the cluster")  # fmt: skip
    aside = [m for m in log if m.startswith("tombstone file has been detected")]
    assert removed in log and len(aside) == 1
    assert "etcd: cluster-init, starting a new cluster" not in log
    store = _store(first)
    member = str(store["member"])
    assert member.startswith("control-plane-") and member != OLD_MEMBER
    assert log.index(removed) < log.index(aside[0]) < log.index(
        f"etcd: member {member} joined cluster {RUNNING_CLUSTER} (25 keys)"
    )
    assert store["cluster"] == RUNNING_CLUSTER
    assert store["keys"] == RUNNING_KEYS
    assert store["members"] == [*RUNNING_MEMBERS[1:], member]
    # The old data dir, set aside by k3s, still on the volume.
    assert first.volume is not None
    assert any(path.startswith("db/etcd-old-") for path in first.volume.files())
    assert first.state["failed"] == []
