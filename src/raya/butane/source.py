"""The Butane YAML as nodes, read with go-yaml v3's typing rules.

Butane decodes YAML with go-yaml v3 into typed Go structs, so a scalar's meaning
depends on the field it lands in, not on YAML 1.1's implicit tags. We therefore
compose nodes (which keep line and column) and type each scalar ourselves.
"""

from __future__ import annotations

import base64
import re
from typing import NamedTuple, TypeAlias

from raya.butane.blockyaml import IMPLICIT, MappingNode, Node, ScalarNode, SequenceNode, read

Path: TypeAlias = tuple[str | int, ...]

# How go-yaml v3 types a scalar (resolve.go, and decode.go's `scalar`): the YAML 1.2 core
# schema for plain scalars, quoted (or `!!str`) scalars are strings, `!!binary` is base64.
_STR_TAG, _BINARY_TAG = "tag:yaml.org,2002:str", "tag:yaml.org,2002:binary"
_NULL_TAG = "tag:yaml.org,2002:null"
_RESOLVED = {"tag:yaml.org,2002:" + name: name for name in ("bool", "int", "float", "timestamp")}
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False,
          "FALSE": False}
_NULL = frozenset(("", "~", "null", "Null", "NULL"))
_SPECIAL_FLOATS = frozenset(f"{sign}.{name}" for sign in ("", "+", "-")
                            for name in ("inf", "Inf", "INF")) | {".nan", ".NaN", ".NAN"}
# decode.go: a string lands in a Go bool only if it is a YAML 1.1 boolean word.
_YAML11_BOOLS = {**dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "on", "On", "ON"), True),
                 **dict.fromkeys(("n", "N", "no", "No", "NO", "off", "Off", "OFF"), False)}
# Go's strconv.ParseInt with base 0, after go-yaml has removed underscores.
_INT = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[oO]?[0-7]+|0[bB][01]+|[1-9][0-9]*|0)")
_INT_BASES = {"x": 16, "X": 16, "o": 8, "O": 8, "b": 2, "B": 2}
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?")
# resolve.go's resolveTable: only a scalar starting with one of these can be other than a str.
_HINTS = frozenset("+-0123456789.yYnNtTfFoO~")


class Undecodable(Exception):
    """A scalar go-yaml refuses outright (bad `!!binary`, `!!int abc`)."""


class Diagnostic(NamedTuple):
    """One finding, located in Butane's terms: JSON path and YAML position."""

    severity: str  # "error" | "warning"
    path: Path
    line: int  # 1-based; 0 when there is no position
    column: int
    message: str
    width: int = 1  # how many characters the finding spans on its line
    stage: int = 2  # context.SOURCE, TRANSLATE or IGNITION: where Butane would find it

    @property
    def json_path(self) -> str:
        return json_path(self.path)


def json_path(path: Path) -> str:
    return "$" + "".join(f".{part}" for part in path)


class YamlSyntaxError(Exception):
    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def compose(text: str) -> Node | None:
    """The document's root node (None for an empty document). Block-style YAML such as
    node configs is read by blockyaml; anything else by PyYAML (imported only then)."""
    root = read(text)
    if root is not None:
        return root
    from raya.butane.fullyaml import compose as compose_any

    return compose_any(text)


def is_null(node: Node | None) -> bool:
    """Absent, `~`, `null` or empty: go-yaml leaves the Go field at its zero value."""
    if node is None:
        return True
    if not isinstance(node, ScalarNode):
        return False
    return node.tag == _NULL_TAG or (
        node.tag == IMPLICIT and not node.style and node.value in _NULL)


def resolve(node: ScalarNode) -> object:
    """The value go-yaml v3 decodes a scalar to: None, bool, int, float, bytes or str.

    bytes come only from `!!binary`; a quoted or `!!str` scalar is always a str; an
    unknown explicit tag (`!foo`) leaves the text as a str, as go-yaml does.
    """
    if node.tag == _BINARY_TAG:
        try:  # Go's StdEncoding skips line breaks and wants the padding
            return base64.b64decode(re.sub("[\r\n]", "", node.value), validate=True)
        except ValueError as error:
            raise Undecodable("!!binary value contains invalid base64 data") from error
    explicit = _RESOLVED.get(node.tag)
    if node.tag == _STR_TAG or (node.tag == IMPLICIT and node.style):
        return node.value
    if node.tag not in (IMPLICIT, _NULL_TAG) and explicit is None:
        return node.value
    found, kind = _plain(node.value, timestamps=explicit in (None, "timestamp"))
    if explicit is not None and kind != explicit and not (explicit == "float" and kind == "int"):
        short = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise Undecodable(f"cannot decode !!{kind} `{node.value}` as a {short}")
    return float(found) if explicit == "float" and kind == "int" else found  # type: ignore[arg-type]


def _plain(text: str, *, timestamps: bool) -> tuple[object, str]:
    """resolve.go on an untagged plain scalar: (value, YAML type)."""
    if text and text[0] not in _HINTS:  # resolve.go's hint table: surely a string
        return text, "str"
    if text in _NULL:
        return None, "null"
    if text in _BOOLS:
        return _BOOLS[text], "bool"
    if text in _SPECIAL_FLOATS:
        return float(text.replace(".", "")), "float"  # Python reads inf, -Inf, NaN
    if timestamps and _TIMESTAMP.fullmatch(text):
        return text, "timestamp"
    number = as_int(text)
    if number is not None:
        return number, "int"
    if _FLOAT.fullmatch(text.replace("_", "")):
        return float(text.replace("_", "")), "float"
    return text, "str"


def as_bool(value: object) -> bool | None:
    """A decoded scalar in a Go bool: a YAML boolean, or a YAML 1.1 word such as `yes`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _YAML11_BOOLS.get(value)
    return None


def as_int(text: str) -> int | None:
    match = _INT.fullmatch(text.replace("_", ""))
    if match is None:
        return None
    sign, digits = match.groups()
    if len(digits) > 1 and digits[0] == "0":
        base = _INT_BASES.get(digits[1], 8)
        digits = digits[2:] if digits[1] in _INT_BASES else digits[1:]
    else:
        base = 10
    value = int(digits, base)
    return -value if sign == "-" else value


def position(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def width(node: Node, key: bool = False) -> int:
    """Characters to underline: a scalar's source text (plus ':' for a key)."""
    start, end = node.start_mark, node.end_mark
    if isinstance(node, ScalarNode) and end.line == start.line:
        return max(1, end.column - start.column) + (1 if key else 0)
    if isinstance(node, MappingNode) and node.value:
        return width(node.value[0][0], key=True)
    return 1


def describe(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return f"`{node.value}`"
