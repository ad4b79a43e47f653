"""Reading the project's JSON and YAML files (fleet, pins, keys, recovery kit, stack files) and
checking their keys, with errors that name the file.

Python's `json` and PyYAML keep the last of two equal keys in one object and drop the other
without a word; raya refuses them instead, naming the file, the key and where, as Pulumi's own
reader of the stack file does (gopkg.in/yaml.v3 `decode.go`, `d.mapping`: "mapping key %#v
already defined at line %d").
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from raya.errors import RayaError


class DuplicateKey(ValueError):
    """Two equal keys in one object or mapping: `where` is `line L column C`."""

    def __init__(self, key: object, where: str) -> None:
        super().__init__(
            f"{where}: key {key!r} appears twice in one object; accepted: each key once"
        )


# The standard library's decoder, whose pure-Python parts are not in its typed interface.
_DECODER: Any = json.decoder
_SCANNER: Any = json.scanner
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def _skip(text: str, position: int) -> int:
    """The position of the first character at or after `position` that is not whitespace."""
    return position + len(_SPACE.match(text, position)[0])  # type: ignore[index]


def _where(text: str, position: int) -> str:
    line = text.count("\n", 0, position) + 1
    return f"line {line} column {position - text.rfind(chr(10), 0, position)}"


def _parse_object(
    s_and_end: tuple[str, int], strict: bool, scan_once: Any, object_hook: Any,
    object_pairs_hook: Any, memo: Any = None,
) -> tuple[dict[str, Any], int]:  # fmt: skip
    """json.decoder.JSONObject, refusing a key seen before in the same object, at the
    position of its second occurrence: found by walking the object's pairs again, as
    JSONObject does (a valid object by then), skipping each value with `scan_once`."""
    text, position = s_and_end
    pairs, end = _DECODER.JSONObject(s_and_end, strict, scan_once, None, list, memo)
    if len({key for key, _ in pairs}) == len(pairs):
        return dict(pairs), end
    seen: set[str] = set()
    while True:
        position = _skip(text, position)
        key, after = _DECODER.scanstring(text, position + 1, strict)
        if key in seen:
            raise DuplicateKey(key, _where(text, position))
        seen.add(key)
        _, after = scan_once(text, _skip(text, _skip(text, after) + 1))  # past the ':'
        position = _skip(text, after) + 1  # past the ','


def _not_json(constant: str) -> None:
    """Python's json reads NaN, Infinity and -Infinity, which JSON does not have (RFC 8259,
    section 6) and no other reader of these files takes."""
    raise ValueError(f"{constant} is not a JSON value; accepted: a number such as 1.5")


class _StrictDecoder(json.JSONDecoder):
    """The pure-Python scanner, whose objects go through `_parse_object`: the C scanner
    parses objects itself and calls no hook with their positions."""

    def __init__(self) -> None:
        super().__init__(parse_constant=_not_json)
        self.parse_object = _parse_object
        self.scan_once = _SCANNER.py_make_scanner(self)


def loads_json(text: str) -> Any:
    """`json.loads`, refusing duplicate keys (DuplicateKey, a ValueError)."""
    return _StrictDecoder().decode(text)


def read_json(path: Path, what: str, error: type[RayaError], hint: str = "") -> Any:
    """The parsed contents of `path`, a `what` file; missing, malformed or holding a key twice
    in one object, an `error`."""
    try:
        return loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: {what} file not found{hint}") from None
    except DuplicateKey as problem:
        raise error(f"{path}: {problem}") from None
    except (OSError, UnicodeDecodeError, ValueError) as problem:  # JSONDecodeError, _not_json
        raise error(f"{path}: not JSON: {problem}") from None


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in the same mapping; a key a merge
    (`<<: *anchor`) brings in may be written again, the YAML merge's own override."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) or key is None:
                if key in seen:
                    mark = key_node.start_mark
                    raise DuplicateKey(key, f"line {mark.line + 1} column {mark.column + 1}")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def loads_yaml(text: str) -> Any:
    """`yaml.safe_load`, refusing duplicate keys (DuplicateKey, a ValueError)."""
    return yaml.load(text, Loader=StrictLoader)


def check_keys(
    mapping: Mapping[str, object],
    accepted: Sequence[str],
    required: Sequence[str],
    fail: Callable[[str, str], RayaError],
    noun: str,
) -> None:
    """Refuse, through `fail(key, problem)`, the first unknown key of `mapping`, then the first
    `required` one it lacks; `accepted` is listed in the order given, and each key is `noun`."""
    unknown = sorted(set(mapping) - set(accepted))
    if unknown:
        raise fail(unknown[0], f"is not {noun}; accepted: {', '.join(accepted)}")
    missing = [key for key in required if key not in mapping]
    if missing:
        raise fail(missing[0], "is required")
