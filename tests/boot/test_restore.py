"""raya's restore against booted control planes (1 and 3, and 3 whose first came back on a
blank volume and joined a peer) and an agent, with the stand-in k3s recording the reset and
the rejoin (tests/boot/restore.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest

from raya.nodes.render import JOIN_DROPIN
from raya.operate.backups import SNAPSHOT_DIR
from tests.boot.datastore import STORE
from tests.boot.restore import CASES, OBJECTS, RestoreRun, configmaps, restore_group
from tests.boot.sim import JOB_DONE, BootedNode, Event, booted_at_once
from tests.operate.s3 import s3_server
from tests.support import require_root, require_tool

Restored = tuple[dict[str, BootedNode], RestoreRun]


@pytest.fixture(scope="module")
def restored() -> Iterator[dict[str, Restored]]:
    for tool in ("debootstrap", "systemd-nspawn", "ip", "dnsmasq", "nsenter", "journalctl",
                 "losetup", "mkfs.ext4", "blkid"):  # fmt: skip
        require_tool(tool)
    require_root("the boot tests (namespaces, mounts, nspawn, loop devices)")
    with s3_server() as s3:
        groups = {case: restore_group(CASES[case][0], s3, CASES[case][1]) for case in CASES}
        with booted_at_once([fleet for fleet, _ in groups.values()]) as nodes:
            yield {
                case: (found, run)
                for (case, (_, run)), found in zip(groups.items(), nodes, strict=True)
            }



def _at(node: BootedNode, event: Event) -> float:
    """The event's time on the host's monotonic clock (every container shares the kernel's)."""
    return node.launched + event.at


# systemd's catalogue entry for a unit stopped (JOB_DONE is the one for started).
UNIT_STOPPED = "9d1aaa27d60140bd96365438aad20286"


def _jobs(node: BootedNode, unit: str, kind: str) -> list[float]:
    """When systemd finished each `kind` job (start, stop) of `unit` successfully."""
    return [
        _at(node, event)
        for event in node.journal()
        if event.fields.get("MESSAGE_ID") == {"start": JOB_DONE, "stop": UNIT_STOPPED}[kind]
        and event.fields.get("UNIT") == unit
        and event.fields.get("JOB_TYPE") == kind
        and event.fields.get("JOB_RESULT") == "done"
    ]


def _said(node: BootedNode, text: str) -> list[float]:
    return [_at(node, e) for e in node.logged("k3s") if e.message.startswith(text)]


@pytest.mark.parametrize("case", list(CASES))
def test_restore_resets_the_first_and_rejoins_the_others(
    restored: dict[str, Restored], case: str
) -> None:
    nodes, run = restored[case]
    count, blank_first = CASES[case]
    assert run.error is None, run.error
    first, *others = run.control_planes
    assert len(run.control_planes) == count
    path = f"{SNAPSHOT_DIR}/{run.snapshot}"
    digest = hashlib.sha256(run.data).hexdigest()

    # Every control plane's k3s stopped (once), the others before the first. (Stops after the
    # restore are the containers' shutdown at the end of the scenario.)
    assert run.done is not None
    stopped = {
        name: [t for t in _jobs(nodes[name], "k3s.service", "stop") if t < run.done]
        for name in run.control_planes
    }
    assert all(len(times) == 1 for times in stopped.values()), stopped
    assert all(stopped[name][0] < stopped[first][0] for name in others)

    # Then the first reset to the snapshot's bytes, from the local copy, S3 off for it, with
    # no drop-in naming a server (k3s would refuse the reset).
    cp = nodes[first]
    (reset,) = _said(cp, "k3s server --cluster-reset")
    files = [e.message for e in cp.logged("k3s")
             if e.message.startswith("config files: ") and _at(cp, e) >= reset]  # fmt: skip
    assert files and JOIN_DROPIN not in files[0].split()  # the reset's, then the start's
    (command,) = [e.message for e in cp.logged("k3s") if e.message.startswith("k3s server --c")]
    assert command == (
        f"k3s server --cluster-reset --cluster-reset-restore-path={path} --etcd-s3=false"
    )
    assert stopped[first][0] < reset
    assert _said(cp, f"etcd: restoring snapshot {path} (sha256 {digest})")
    assert _said(cp, "Managed etcd cluster membership has been reset")

    # The first starts as the reset member, before any other starts again.
    (reset_member,) = _said(cp, "etcd: the reset member")
    assert reset < reset_member
    message = [e.message for e in cp.logged("k3s") if e.message.startswith("etcd: the reset")]
    assert message[0].endswith(f"restored from {digest}; reset-flag removed")
    first_back = [t for t in _jobs(cp, "k3s.service", "start") if t > reset]
    assert len(first_back) == 1

    # The others: etcd data removed while stopped, back as new members, after the first.
    for name in others:
        node = nodes[name]
        starts = _said(node, "k3s server")
        assert len(starts) == 2, starts  # the boot, then the rejoin
        assert starts[1] > first_back[0]
        fresh = _said(node, "etcd: no member data: starting as a new member")
        # The stand-in says both in one start; the journal can stamp them the same moment.
        assert fresh[-1] >= starts[1]
        # At boot a new member too, or (blank_first) the member its volume held.
        assert len(fresh) == 1 + (not blank_first)
        assert len(_said(node, "etcd: existing member data")) == blank_first
        (removed,) = [r for r in run.ran if r.node == name and r.command[0] == "rm"]
        assert stopped[name][0] < removed.started and removed.ended < starts[1]

    # Each control plane's k3s runs again; the agent was never touched.
    for name in run.control_planes:
        assert nodes[name].state["active"]["k3s.service"] == "active", name
    agent = nodes["agent-0"]
    assert not [t for t in _jobs(agent, "k3s-agent.service", "stop") if t < run.done]
    assert len(_jobs(agent, "k3s-agent.service", "start")) == 1
    assert agent.state["active"]["k3s-agent.service"] == "active"
    assert not [r for r in run.ran if r.node == "agent-0"]


@pytest.mark.parametrize("case", list(CASES))
def test_every_member_holds_the_objects_of_the_snapshot(
    restored: dict[str, Restored], case: str
) -> None:
    """The 120 ConfigMaps of the snapshot, and only they (with `blank_first` the cluster
    held 30 more, written after it), in each control plane's etcd, all members of one
    cluster: the reset one's, which the others joined."""
    nodes, run = restored[case]
    assert run.error is None, run.error
    stores = {}
    for name in run.control_planes:
        volume = nodes[name].volume
        assert volume is not None
        stores[name] = json.loads(volume.files()[STORE])
    assert {name: len(store["keys"]) for name, store in stores.items()} == {
        name: 120 for name in run.control_planes
    }
    assert all(store["keys"] == configmaps(OBJECTS) for store in stores.values())
    assert len({store["cluster"] for store in stores.values()}) == 1
    # Each other member joined through the registration balancer, copying the list of
    # whichever member answered as of its join (the stand-in replicates no membership): each
    # list names the reset member and its own, and together they name every member, no other.
    reset = stores[run.control_planes[0]]["member"]
    assert all({reset, store["member"]} <= set(store["members"]) for store in stores.values())
    named = set().union(*(store["members"] for store in stores.values()))
    assert named == {store["member"] for store in stores.values()}


def test_the_first_joined_a_peer_before_the_restore(restored: dict[str, Restored]) -> None:
    """The state the restore starts from in the third case: the first control plane, on a
    blank volume, joined control-plane-1 or -2 through the drop-in its guard wrote, which was
    still there when the restore began."""
    nodes, run = restored["3, the first blank and joined"]
    first = nodes[run.control_planes[0]]
    (decision, *later) = [e.message for e in first.logged("raya-k3s-datastore")]
    assert "holds no datastore and 10.0.1.1" in decision and "k3s joins it" in decision
    (config, *_) = [e.message for e in first.logged("k3s")
                    if e.message.startswith("config files: ")]  # fmt: skip
    assert JOIN_DROPIN in config.split()
    assert [e.message for e in first.logged("k3s") if e.message.startswith("joined https")]
    # After the reset, the guard found the volume holding a datastore, the drop-in gone.
    assert later and all("holds a datastore: k3s starts from it as configured" in line
                         for line in later)  # fmt: skip
    assert [r.command for r in run.ran if r.node == first.plan.name and r.command[0] == "rm"] == [
        ("rm", "-f", JOIN_DROPIN)
    ]


def test_no_object_storage_key_reaches_a_node(restored: dict[str, Restored]) -> None:
    """The snapshot travels over raya's channel: no S3 key on any command line raya ran."""
    from tests.operate.s3 import ACCESS_KEY, SECRET_KEY

    for _, run in restored.values():
        assert run.ran
        lines = [" ".join(r.command) for r in run.ran]
        assert not [line for line in lines if SECRET_KEY in line or ACCESS_KEY in line]
