"""An Ignition config given inline in `ignition.config.merge`/`replace`, read for checking.

Butane validates such a config (base/v0_x/validate.go `Resource.Validate` calls
`ValidateIgnitionConfig` for `inline` under `$.ignition.config`): Go's encoding/json
decodes it into Ignition's types, an unknown `ignition.version` only earns a warning, and
a config of the right version gets Ignition's full validation. Here the JSON becomes YAML
nodes under the Butane schema, so the walk and its checks apply to it unchanged.
"""

from __future__ import annotations

import json
import re
from typing import Any

from raya.butane.blockyaml import IMPLICIT, MappingNode, Mark, Node, ScalarNode, SequenceNode
from raya.butane.schema import CONFIG, Kind, ListOf, Obj

_STR_TAG = "tag:yaml.org,2002:str"
# Ignition's Ignition.Semver: coreos/go-semver's major.minor.patch[-pre][+build].
_SEMVER = re.compile(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")
# Where Butane cannot place a finding of the embedded config in the YAML: line 1, column 1.
_MARK = Mark(0, 0)


class NotAConfig(ValueError):
    """JSON that encoding/json cannot decode into Ignition's Config."""


def parse(text: str, minor: int) -> tuple[Node, str | None]:
    """The config as nodes for fcos 1.<minor>, and its `ignition.version` if that is a
    semantic version (None if not)."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise NotAConfig(f"config is not valid JSON: {error}") from error
    node = _node(data, CONFIG, minor=minor)
    found = (data.get("ignition") or {}).get("version")
    if not isinstance(found, str | None):
        raise NotAConfig(f"cannot unmarshal {_json_type(found)} into ignition.version")
    return node, found if isinstance(found, str) and _SEMVER.fullmatch(found) else None


def _node(value: Any, kind: Kind, *, minor: int) -> Node:
    """Go's json.Unmarshal into Ignition's types, as nodes the walk reads the same way."""
    if isinstance(kind, Obj):
        if not isinstance(value, dict):
            raise NotAConfig(f"cannot unmarshal {_json_type(value)} into {kind.name}")
        # Go's json ignores keys its types lack, later versions' fields included.
        fields = {f.out: f for f in kind.fields if f.out and f.since <= minor}
        pairs = [(_scalar(f.key), _node(item, f.kind, minor=minor))
                 for key, item in value.items()
                 if (f := fields.get(key)) is not None and item is not None]
        return MappingNode(IMPLICIT, pairs, _MARK, _MARK)
    if isinstance(kind, ListOf):
        if not isinstance(value, list):
            raise NotAConfig(f"cannot unmarshal {_json_type(value)} into a list")
        # encoding/json leaves a null item at its zero value: "" or an empty object.
        return SequenceNode(IMPLICIT, [_node(_zero(item, kind.item), kind.item, minor=minor)
                                      for item in value], _MARK, _MARK)
    expected = {"str": str, "int": int, "bool": bool}[kind]
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        raise NotAConfig(f"cannot unmarshal {_json_type(value)} into {kind}")
    if isinstance(value, str):
        return _scalar(value)
    return ScalarNode(IMPLICIT, json.dumps(value), _MARK, _MARK)


def _zero(value: Any, kind: Kind) -> Any:
    if value is not None:
        return value
    return {} if isinstance(kind, Obj) else [] if isinstance(kind, ListOf) else {
        "str": "", "int": 0, "bool": False}[kind]


def _scalar(text: str) -> ScalarNode:
    return ScalarNode(_STR_TAG, text, _MARK, _MARK)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "null"
