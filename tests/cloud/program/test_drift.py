"""No change replaces a VM behind the user's back: under mocks that play the engine's state
(ignore_changes, ForceNew, `--replace`), a change of users, pins or config replaces nothing
and is reported as drift on exactly the nodes it concerns; `replace=` re-creates the nodes
named, with the new config."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from raya.model.fleet import Cluster
from raya.model.pins import snapshot_labels
from raya.nodes.render import SSH_HANDLES_FILE
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import ProviderMocks, Run, Snapshot, reveal
from tests.cloud.program.test_program import EXAMPLE, PINS, SERVER, provider_mocks, run, user_data

NODES = ["control-plane", "agent-0", "agent-1", "agent-2"]
# What Hetzner names uniquely per project.
NAMED = {SERVER, "hcloud:index/volume:Volume", "hcloud:index/network:Network"}


def with_config(cluster: Cluster, **changes: Any) -> Cluster:
    return dataclasses.replace(cluster, config=dataclasses.replace(cluster.config, **changes))


def server_ids(result: Run) -> dict[str, str]:
    return {name: r.id for name, r in result.of_type(SERVER).items()}


def running(mocks: ProviderMocks) -> dict[str, str]:
    """Each server's user_data as the state holds it: what the VM was created with."""
    return {
        name: reveal(json.loads(stored.inputs)["userData"])
        for (typ, name), stored in mocks.state.items()
        if typ == SERVER
    }


def handles(user_data: str) -> bytes:
    return ignition_files(user_data)[SSH_HANDLES_FILE]


def test_a_change_of_users_replaces_nothing_and_is_drift_on_every_node() -> None:
    mocks = provider_mocks()
    before = run(mocks)
    users = (*EXAMPLE.config.authorized_users, "octo-carol")
    after = run(mocks, with_config(EXAMPLE, authorized_users=users))
    assert after.replaced == []
    assert server_ids(after) == server_ids(before)
    # The servers keep the user_data they run: the engine kept the ignored input.
    assert running(mocks) == user_data(before)
    assert user_data(after) != user_data(before)
    assert after.outputs["drift"] == {node: ["users"] for node in NODES}
    # ...and it stays reported, run after run, until the nodes are replaced.
    assert run(mocks, with_config(EXAMPLE, authorized_users=users)).outputs["drift"] == {
        node: ["users"] for node in NODES
    }


def test_a_pin_bump_replaces_nothing_and_is_image_drift() -> None:
    mocks = provider_mocks()
    before = run(mocks)
    labels = snapshot_labels(PINS, EXAMPLE.config.cluster_name)
    mocks.snapshots.append(Snapshot(50, labels, created="2026-12-01T00:00:00+00:00"))
    after = run(mocks)
    assert after.replaced == []
    assert server_ids(after) == server_ids(before)
    assert {reveal(r.inputs)["image"] for r in after.of_type(SERVER).values()} == {"50"}
    assert {r.outputs["image"] for r in after.of_type(SERVER).values()} == {"42"}
    assert after.outputs["drift"] == {node: ["image"] for node in NODES}


def test_a_config_change_is_drift_on_the_nodes_it_concerns_only() -> None:
    mocks = provider_mocks()
    before = run(mocks)
    after = run(mocks, with_config(EXAMPLE, managed_subdomain="k8s"))  # the CP's tls-san
    # The zone and its records are re-created (what --no-destroy-protected stops); no server.
    assert not set(after.replaced) & set(NODES)
    assert "primary" in after.replaced
    assert server_ids(after) == server_ids(before)
    assert after.outputs["drift"] == {"control-plane": ["config"]}


def test_the_control_plane_and_its_volume_are_protected() -> None:
    result = run(provider_mocks())
    protected = sorted(name for name, r in result.resources.items() if r.options.protect)
    assert protected == ["backups", "control-plane", "control-plane-state"]
    # What would re-create a server, and the digests that tell what it runs (docs/deploy.md).
    # A server joins its placement group when created: an existing one never moves.
    ignored = (
        "userData", "image", 'labels["raya-users"]', 'labels["raya-config"]', "placementGroupId"
    )
    for name in NODES:
        assert result.resources[name].options.ignore_changes == ignored


def test_two_stacks_in_one_project_get_distinct_server_names() -> None:
    staging = with_config(EXAMPLE, cluster_name="staging")
    names = []
    for cluster in (EXAMPLE, staging):
        mocks = provider_mocks()  # each stack its own state, one Hetzner project's snapshots
        mocks.snapshots.append(Snapshot(60, snapshot_labels(PINS, "staging")))
        result = run(mocks, cluster)
        names.append(
            {reveal(r.inputs)["name"] for r in result.resources.values() if r.typ in NAMED}
        )
    assert names[0] == {f"raya-{node}" for node in NODES} | {"raya-control-plane-state", "raya"}
    assert not names[0] & names[1]
    assert f"staging-{NODES[1]}" in names[1]


def test_a_forced_replacement_alone_would_carry_the_old_user_data() -> None:
    """Why `replace=` exists: `pulumi up --replace` keeps ignored inputs (Pulumi's docs)."""
    mocks = provider_mocks()
    before = run(mocks)
    users = (*EXAMPLE.config.authorized_users, "octo-carol")
    mocks.force_replace = frozenset({"agent-1"})
    after = run(mocks, with_config(EXAMPLE, authorized_users=users))
    assert [name for name in after.replaced if name in NODES] == ["agent-1"]
    assert running(mocks)["agent-1"] == user_data(before)["agent-1"]  # the old config
    assert after.outputs["drift"]["agent-1"] == ["users"]


def test_replace_recreates_the_nodes_named_with_the_new_user_data() -> None:
    mocks = provider_mocks()
    before = run(mocks)
    users = (*EXAMPLE.config.authorized_users, "octo-carol")
    changed = with_config(EXAMPLE, authorized_users=users)
    mocks.force_replace = frozenset({"agent-1"})  # what `raya.cloud.deploy.run(replace=)` asks
    after = run(mocks, changed, replace={"agent-1"})
    assert [name for name in after.replaced if name in NODES] == ["agent-1"]
    assert server_ids(after)["agent-1"] != server_ids(before)["agent-1"]
    now = running(mocks)
    assert now["agent-1"] == user_data(after)["agent-1"]
    assert handles(now["agent-1"]).decode().splitlines() == list(users)
    assert now["agent-0"] == user_data(before)["agent-0"]
    assert after.resources["agent-1"].options.ignore_changes == ()
    assert after.outputs["drift"] == {node: ["users"] for node in NODES if node != "agent-1"}

    # The next ordinary run keeps it, ignores again, and finds it in sync.
    mocks.force_replace = frozenset()
    again = run(mocks, changed)
    assert again.replaced == []
    assert running(mocks) == now
    assert "agent-1" not in again.outputs["drift"]


def test_replacing_the_control_plane_keeps_its_volume() -> None:
    mocks = provider_mocks()
    before = run(mocks)
    mocks.force_replace = frozenset({"control-plane"})
    after = run(mocks, replace={"control-plane"})
    assert [name for name in after.replaced if name.startswith("control-plane")] == [
        "control-plane",
        "control-plane-volume",
    ]
    assert after.resources["control-plane"].options.protect is False
    volume = after.resources["control-plane-state"]
    assert volume.id == before.resources["control-plane-state"].id
    device = f"/dev/disk/by-id/scsi-0HC_Volume_{volume.id}"
    assert device in running(mocks)["control-plane"]
