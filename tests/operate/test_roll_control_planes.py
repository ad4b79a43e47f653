"""`raya roll`'s plan with several control planes: they come first, before any agent (k3s'
upgrade order: servers, then agents), one step each in their order, each drained like an
agent once etcd's quorum is checked, its Node object deleted only once its server is gone."""

from __future__ import annotations

from raya.operate import roll as rl

NODES = ["control-plane", "control-plane-1", "control-plane-2", "agent-0", "agent-1"]


def test_control_planes_come_first_one_at_a_time_in_their_order() -> None:
    steps = rl.plan(NODES, [], ["control-plane-2", "agent-1", "control-plane", "control-plane-1"])
    assert [s.node for s in steps] == [
        "control-plane", "control-plane-1", "control-plane-2", "agent-1",
    ]  # fmt: skip
    assert steps[0].actions == (
        rl.QUORUM, rl.LOCAL_DATA, rl.VOLUME_PLACES, rl.CORDON, rl.DRAIN, rl.DETACH, rl.REPLACE,
        rl.DELETE_GONE_NODE, rl.LEFTOVERS, rl.BACK, rl.MEMBER, rl.ALL_READY,
    )  # fmt: skip
    assert steps[1].actions == steps[2].actions == steps[0].actions
    assert [(s.node, s.actions) for s in rl.plan(NODES, ["control-plane-1"], [])] == [
        ("control-plane-1", steps[0].actions)
    ]
