"""`raya status` with three control planes: they come first in their order, and `cp`, the
API's name, is judged against every control plane's address."""

from __future__ import annotations

from typing import Any

from raya.operate import status as st
from tests.cloud.program.test_control_planes import run as run_sized
from tests.cloud.program.test_control_planes import sized
from tests.cloud.program.test_program import PINS, provider_mocks
from tests.operate.test_status import _healthy_facts


def test_cp_holds_every_control_planes_address() -> None:
    outputs: dict[str, Any] = run_sized(provider_mocks(), sized(3)).outputs
    servers = outputs["servers"]
    everyone = [servers[n]["ipv4"] for n in ("control-plane-2", "control-plane", "control-plane-1")]
    facts = _healthy_facts(outputs)
    facts["records"]["control-plane"] = everyone  # any order, as name servers answer
    report = st.assess(outputs, PINS, "raya", **facts)
    assert [row.node for row in report.rows] == [
        "control-plane", "control-plane-1", "control-plane-2", "agent-0", "agent-1", "agent-2",
    ]  # fmt: skip
    assert report.healthy
    # cp answering with the first alone misses two control planes.
    facts["records"]["control-plane"] = [servers["control-plane"]["ipv4"]]
    (row, *_) = st.assess(outputs, PINS, "raya", **facts).rows
    assert row.checks["dns"].state == st.UNHEALTHY
    assert "expected" in row.checks["dns"].text
