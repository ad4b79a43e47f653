"""Bad input, class by class: each refused with one line naming the file or option, the value
and what is accepted, before anything is written (issue 35).

Each table holds several inputs of one class; the rule is built, not the case, so each class
mixes places (top level, nested, the last key, a key written with an escape) and files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from raya.cloud import kit
from raya.errors import RayaError
from raya.model.config import load_stack_config
from raya.model.fleet import load_fleet
from raya.model.pins import parse_chart_pins, parse_fcos_pin
from raya.model.project import EXAMPLE_ROOT
from raya.nodes.github_keys import load_keys_file

EXAMPLE_STACK = EXAMPLE_ROOT / "Pulumi.example.yaml"
STACK = EXAMPLE_STACK.read_text()

# --- duplicate keys, in every file raya reads --------------------------------------------------
# (file name, reader, text, the key, its line): the line of the key's second occurrence.
Reader = Callable[[Path], object]
DUPLICATES: list[tuple[str, Reader, str, str, int]] = [
    ("agents.json", load_fleet, '{"agents": ["cx23"],\n "agents": []}', "agents", 2),
    (
        "agents.json",
        load_fleet,
        '{"pools": [{"name": "web", "type": "cx23", "count": 1,\n'
        ' "addresses": "10.0.1.64/28",\n "labels": {"tier": "a", "tier": "b"}}]}',
        "tier",
        3,
    ),
    (
        "agents.json",
        load_fleet,
        '{"pools": [{"name": "web", "name": "api", "type": "cx23", "count": 1, '
        '"addresses": "10.0.1.64/28"}]}',
        "name",
        1,
    ),
    # The same key, once escaped: JSON reads both as "count".
    (
        "agents.json",
        load_fleet,
        '{"pools": [{"name": "web", "type": "cx23", "count": 1,\n "addresses": "10.0.1.64/28",'
        '\n  "\\u0063ount": 0}]}',
        "count",
        3,
    ),
    ("fcos.json", parse_fcos_pin, '{"stream": "stable",\n\n "stream": "next"}', "stream", 3),
    ("charts.json", parse_chart_pins, '{"a": {"version": "1"},\n "a": {"version": "2"}}', "a", 2),
    ("keys.json", load_keys_file, '{"octo-alice": [],\n  "octo-alice": []}', "octo-alice", 2),
    (
        "kit.json",
        lambda path: kit.load(path, load_stack_config(EXAMPLE_STACK)),
        '{"format": "raya-recovery-kit",\n "serverToken": "x",\n "serverToken": "y"}',
        "serverToken",
        3,
    ),
    (
        "Pulumi.prod.yaml",
        load_stack_config,
        STACK + "  raya:clusterName: other\n",
        "raya:clusterName",
        STACK.count("\n") + 1,
    ),
    (
        "Pulumi.prod.yaml",
        load_stack_config,
        STACK + "  raya:backupS3:\n    endpoint: a.example\n    bucket: abc\n    bucket: abd\n",
        "bucket",
        STACK.count("\n") + 4,
    ),
]


@pytest.mark.parametrize(("name", "read", "text", "key", "line"), DUPLICATES)
def test_a_key_twice_in_one_object_is_refused_naming_file_key_and_line(
    tmp_path: Path, name: str, read: Reader, text: str, key: str, line: int
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RayaError) as refused:
        read(path)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: line {line} column ")
    assert f"key {key!r} appears twice in one object; accepted: each key once" in message
    # Secrets stay out of the message: the recovery kit's values are never shown.
    assert '"x"' not in message and "'y'" not in message


def test_keys_only_alike_in_other_objects_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    pool = {"name": "web", "type": "cx23", "count": 1, "addresses": "10.0.1.64/28",
            "labels": {"name": "web"}}  # fmt: skip
    path.write_text(
        json.dumps({"pools": [pool, {**pool, "name": "api", "addresses": "10.0.1.80/28"}]})
    )
    assert [p.name for p in load_fleet(path).pools] == ["web", "api"]
