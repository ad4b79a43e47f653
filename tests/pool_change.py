"""One pool change, checked at two layers (the model's identities, the program's servers): the
arm pool grows from 1 to 3 and moves to the front, batch is removed, gpu is added between them.
Every node that stays keeps its name and address."""

from __future__ import annotations

from typing import Any

BEFORE: dict[str, Any] = {
    "agents": ["cx23"],
    "pools": [
        {"name": "web", "type": "cx33", "count": 2, "addresses": "10.0.1.64/28"},
        {"name": "batch", "type": "cx43", "count": 2, "addresses": "10.0.1.96/28"},
        {"name": "arm", "type": "cax21", "count": 1, "addresses": "10.0.1.128/27",
         "location": "fsn1"},
    ],
}  # fmt: skip
AFTER: dict[str, Any] = {
    "agents": ["cx23"],
    "pools": [
        {"name": "arm", "type": "cax21", "count": 3, "addresses": "10.0.1.128/27",
         "location": "fsn1"},
        {"name": "gpu", "type": "ccx33", "count": 1, "addresses": "10.0.1.80/28"},
        {"name": "web", "type": "cx33", "count": 2, "addresses": "10.0.1.64/28"},
    ],
}  # fmt: skip
ADDRESSES_BEFORE = {
    "control-plane": "10.0.1.10",
    "agent-0": "10.0.1.20",
    "web-0": "10.0.1.64",
    "web-1": "10.0.1.65",
    "batch-0": "10.0.1.96",
    "batch-1": "10.0.1.97",
    "arm-0": "10.0.1.128",
}
ADDRESSES_AFTER = {
    "control-plane": "10.0.1.10",
    "agent-0": "10.0.1.20",
    "arm-0": "10.0.1.128",
    "arm-1": "10.0.1.129",
    "arm-2": "10.0.1.130",
    "gpu-0": "10.0.1.80",
    "web-0": "10.0.1.64",
    "web-1": "10.0.1.65",
}
STAYING = {"control-plane", "agent-0", "web-0", "web-1", "arm-0"}
