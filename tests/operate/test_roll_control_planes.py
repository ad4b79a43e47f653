"""`raya roll`'s plan with several control planes: they come first, before any agent (k3s'
upgrade order: servers, then agents), one step each in their order, and none is drained like
an agent."""

from __future__ import annotations

from raya.operate import roll as rl

NODES = ["control-plane", "control-plane-1", "control-plane-2", "agent-0", "agent-1"]


def test_control_planes_come_first_one_at_a_time_in_their_order() -> None:
    steps = rl.plan(NODES, [], ["control-plane-2", "agent-1", "control-plane", "control-plane-1"])
    assert [(s.node, s.drain) for s in steps] == [
        ("control-plane", False),
        ("control-plane-1", False),
        ("control-plane-2", False),
        ("agent-1", True),
    ]
    assert [(s.node, s.drain) for s in rl.plan(NODES, ["control-plane-1"], [])] == [
        ("control-plane-1", False)
    ]
