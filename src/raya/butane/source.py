"""The Butane YAML as PyYAML nodes, read with go-yaml v3's typing rules.

Butane decodes YAML with go-yaml v3 into typed Go structs, so a scalar's meaning
depends on the field it lands in, not on YAML 1.1's implicit tags. We therefore
compose nodes (which keep line and column) and type each scalar ourselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

import yaml

Path: TypeAlias = tuple[str | int, ...]
Node: TypeAlias = yaml.Node

# go-yaml v3 accepts YAML 1.1 booleans when the target is a bool.
_TRUE = frozenset(["y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE"])
_FALSE = frozenset(["n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE"])
_NULL = frozenset(("", "~", "null", "Null", "NULL"))
# Go's strconv.ParseInt with base 0, after go-yaml has removed underscores.
_INT = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|0[oO]?[0-7]+|0[bB][01]+|[1-9][0-9]*|0)")
_INT_BASES = {"x": 16, "X": 16, "o": 8, "O": 8, "b": 2, "B": 2}

_TAGS = {yaml.ScalarNode: "tag:yaml.org,2002:str", yaml.SequenceNode: "tag:yaml.org,2002:seq",
         yaml.MappingNode: "tag:yaml.org,2002:map"}


class _Untyped(yaml.resolver.BaseResolver):
    """No implicit typing: go-yaml's rules are applied per field, later."""

    def descend_resolver(self, current_node: object, current_index: object) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: type, value: object, implicit: object) -> str:
        return _TAGS[kind]


try:  # libyaml is several times faster; both report the same marks
    from yaml._yaml import CParser

    class _Loader(CParser, _Untyped):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Untyped.__init__(self)

except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(Reader, Scanner, Parser, Composer, _Untyped):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)
            _Untyped.__init__(self)


@dataclass(frozen=True)
class Diagnostic:
    """One finding, located in Butane's terms: JSON path and YAML position."""

    severity: str  # "error" | "warning"
    path: Path
    line: int  # 1-based; 0 when there is no position
    column: int
    message: str
    width: int = 1  # how many characters the finding spans on its line
    # Butane checks the generated Ignition config only once its own checks and the
    # translation found no error: findings of that last stage are dropped otherwise.
    generated: bool = False

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
    """The document's root node (None for an empty document)."""
    try:
        loader = _Loader(text)
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        problem = " ".join(filter(None, (error.context, error.problem)))
        raise YamlSyntaxError(
            Diagnostic("error", (), line, column, f"invalid YAML: {problem}")
        ) from error
    except yaml.YAMLError as error:
        raise YamlSyntaxError(Diagnostic("error", (), 0, 0, f"invalid YAML: {error}")) from error


def is_null(node: Node | None) -> bool:
    """Absent, `~`, `null` or empty: go-yaml leaves the Go field at its zero value."""
    if node is None:
        return True
    if not isinstance(node, yaml.ScalarNode):
        return False
    return node.tag == "tag:yaml.org,2002:null" or (not node.style and node.value in _NULL)


def _plain(node: yaml.ScalarNode) -> bool:
    # Only unquoted scalars are resolved to bools and ints; a quoted one stays a string.
    # (PyYAML's pure parser marks plain style as None, libyaml's as "".)
    return not node.style


def as_bool(node: yaml.ScalarNode) -> bool | None:
    if _plain(node):
        if node.value in _TRUE:
            return True
        if node.value in _FALSE:
            return False
    return None


def as_int(node: yaml.ScalarNode) -> int | None:
    if not _plain(node):
        return None
    match = _INT.fullmatch(node.value.replace("_", ""))
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
    if isinstance(node, yaml.ScalarNode) and end.line == start.line:
        return max(1, end.column - start.column) + (1 if key else 0)
    if isinstance(node, yaml.MappingNode) and node.value:
        return width(node.value[0][0], key=True)
    return 1


def describe(node: Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"`{node.value}`"
