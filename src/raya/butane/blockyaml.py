"""The YAML nodes the transpiler walks, and a reader for the block-style YAML Butane configs
are written in, without PyYAML.

Importing PyYAML costs `raya butane` about as much CPU as the real Butane takes for a whole
config, and node configs use a small part of YAML: block mappings and sequences, one-line
plain or quoted scalars, `|` literal blocks and one-line flow mappings such as
`user: {name: core}`. `read` builds, for such text, exactly the tree PyYAML's libyaml
composer builds (same values, styles and marks: tests/butane/test_blockyaml.py compares
them on every vector, every rendered config and generated text). For anything else it
returns None and `source.compose` asks PyYAML: anchors, tags, folded or indented blocks,
multi-line or escaped scalars, flow across lines, tabs, `\\r`, document markers, errors.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from typing import Any

# No tag written: composed nodes carry this, so an explicit `!!str` stays distinguishable.
IMPLICIT = ""


class Mark:
    """A position in the YAML, 0-based, as PyYAML's marks give it (line, column)."""

    __slots__ = ("column", "line")

    def __init__(self, line: int, column: int) -> None:
        self.line = line
        self.column = column


class Node:
    """PyYAML's node, with the fields the transpiler reads. `value` is the text of a
    scalar, the nodes of a sequence, the (key, value) pairs of a mapping. `end_mark` is
    read for scalars only (report.py underlines a scalar's text); `style` is a scalar's
    quoting (`''` plain, `'`, `"`, `|`, `>`), None for collections."""

    __slots__ = ("end_mark", "start_mark", "style", "tag", "value")

    def __init__(self, tag: str, value: Any, start_mark: Mark, end_mark: Mark,
                 style: str | None = None) -> None:
        self.tag = tag
        self.value = value
        self.start_mark = start_mark
        self.end_mark = end_mark
        self.style = style


class ScalarNode(Node):
    __slots__ = ()


class SequenceNode(Node):
    __slots__ = ()


class MappingNode(Node):
    __slots__ = ()


# Characters outside the subset: \r, NEL, LS and PS are line breaks in YAML 1.1, a BOM,
# control character or lone surrogate is refused or special. Node configs are ASCII, for
# which deleting the ordinary bytes (in C) leaves the odd ones; the pattern for all of
# Unicode takes several milliseconds to compile, so only other text pays for it.
_ASCII_TEXT = b"\t\n" + bytes(range(0x20, 0x7F))
_ODD_PATTERN = ("[^\t\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd"
                "\U00010000-\U0010ffff]")
# Document markers and directives (at the start of a line): where documents start and end
# is left to PyYAML.
_MARKERS = ("---", "...", "%")
# A plain key and the colon and spaces after it (the value starts at the match's end).
_KEY = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_./+-]*):(?: +|$)")
# A plain scalar in a one-line flow collection: no indicator, quote, space or comment.
_FLOW_PLAIN = re.compile(r"[^\s,\[\]{}:#'\"&*!|>%@`?-][^\s,\[\]{}:#'\"]*")
# What a block plain scalar may not start with (`-`, `?`, `:` only before a space, but
# `-1` is rare enough to leave to PyYAML too).
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")


class _Unsure(Exception):
    """The text leaves the subset read here: PyYAML decides."""


def read(text: str) -> MappingNode | None:
    """The root mapping PyYAML would compose from `text`, or None if `text` is outside
    the subset this reader is sure of."""
    if not text.endswith("\n"):
        return None
    if text.isascii():
        if text.encode("ascii").translate(None, _ASCII_TEXT):
            return None
    elif re.search(_ODD_PATTERN, text):  # re caches the compiled pattern
        return None
    if text.startswith(_MARKERS) or any("\n" + marker in text for marker in _MARKERS):
        return None
    lines = text.split("\n")[:-1]
    try:
        return _Reader(lines).document()
    except (_Unsure, IndexError):
        return None


class _Reader:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.end = len(lines)

    def document(self) -> MappingNode:
        first = self.content(0)
        if first == self.end:
            raise _Unsure  # an empty document
        root, after = self.mapping(first, self.indent(first))
        if self.content(after) != self.end:
            raise _Unsure  # text after the root mapping: an error for PyYAML to word
        return root

    def indent(self, i: int) -> int:
        line = self.lines[i]
        return len(line) - len(line.lstrip(" "))

    def content(self, i: int) -> int:
        """The first line from `i` on that holds more than spaces and a comment."""
        lines = self.lines
        while i < self.end:
            stripped = lines[i].lstrip(" ")
            if stripped and stripped[0] != "#":
                if stripped[0] == "\t":
                    raise _Unsure
                return i
            i += 1
        return i

    def is_item(self, i: int, column: int) -> bool:
        line = self.lines[i]
        return line[column] == "-" and (len(line) == column + 1 or line[column + 1] == " ")

    def mapping(self, i: int, column: int) -> tuple[MappingNode, int]:
        """The block mapping whose first key is at (i, column), and the line after it."""
        pairs = []
        start = Mark(i, column)
        while True:
            line = self.lines[i]
            match = _KEY.match(line, column)
            if match is None or "\t" in line:
                raise _Unsure
            key = match.group(1)
            colon = column + len(key) + 1
            key_node = ScalarNode(IMPLICIT, key, Mark(i, column), Mark(i, colon - 1), "")
            value, i = self.value(i, colon, match.end(), column)
            pairs.append((key_node, value))
            i = self.content(i)
            if i == self.end or self.indent(i) < column:
                return MappingNode(IMPLICIT, pairs, start, start), i
            if self.indent(i) > column:
                raise _Unsure

    def value(self, i: int, colon: int, at: int, column: int) -> tuple[Node, int]:
        """The value of the key at `column` whose colon ends at `colon`; `at` is where its
        text would start on the line."""
        line = self.lines[i]
        if at < len(line) and line[at] != "#":
            return self.inline(i, at, column)
        after = self.content(i + 1)
        if after < self.end:
            indent = self.indent(after)
            if indent > column:
                if self.is_item(after, indent):
                    return self.sequence(after, indent, indentless=False)
                return self.mapping(after, indent)
            if indent == column and self.is_item(after, column):
                return self.sequence(after, column, indentless=True)
        # Nothing: libyaml's empty scalar, placed just after the colon.
        return ScalarNode(IMPLICIT, "", Mark(i, colon), Mark(i, colon), ""), i + 1

    def sequence(self, i: int, column: int, *, indentless: bool) -> tuple[SequenceNode, int]:
        """The block sequence whose first `-` is at (i, column), and the line after it."""
        items = []
        start = Mark(i, column)
        item: Node
        while True:
            line = self.lines[i]
            at = column + 1
            while at < len(line) and line[at] == " ":
                at += 1
            if at == len(line) or line[at] == "#" or "\t" in line:
                raise _Unsure  # an empty item, or one on the lines below
            if self.is_item(i, at):
                item, i = self.sequence(i, at, indentless=False)
            elif _KEY.match(line, at):
                item, i = self.mapping(i, at)
            else:
                item, i = self.inline(i, at, column)
            items.append(item)
            i = self.content(i)
            if i == self.end or self.indent(i) < column:
                break
            if self.indent(i) == column and self.is_item(i, column):
                continue
            if self.indent(i) == column and indentless:
                break  # the next key of the mapping the sequence is a value of
            raise _Unsure
        return SequenceNode(IMPLICIT, items, start, start), i

    def inline(self, i: int, at: int, column: int) -> tuple[Node, int]:
        """A scalar or flow collection starting at (i, at), in the block collection at
        `column`, and the line after it."""
        line = self.lines[i]
        first = line[at]
        node: Node
        if first == "|":
            node, after = self.literal(i, at, column)
        else:
            if first in "'\"":
                node, end = _quoted(line, i, at)
            elif first in "{[":
                node, end = _flow(line, i, at)
            elif first in _INDICATORS:
                raise _Unsure
            else:
                node, end = _plain(line, i, at)
            rest = line[end:].lstrip(" ")
            if rest and (rest[0] != "#" or end == len(line) - len(rest)):
                raise _Unsure  # more after the value, or `#` that is no comment
            after = i + 1
        following = self.content(after)
        if following < self.end and self.indent(following) > column:
            raise _Unsure  # a plain scalar going on below, or an error
        return node, after

    def literal(self, i: int, at: int, column: int) -> tuple[ScalarNode, int]:
        """A `|` block (clip, `|-` strip or `|+` keep) whose indentation libyaml detects."""
        header = self.lines[i][at + 1:]
        chomp = header[:1] if header[:1] in ("-", "+") else ""
        header = header[len(chomp):]
        if header.strip(" ") and not (header.startswith(" ") and header.lstrip(" ")[0] == "#"):
            raise _Unsure  # an indentation indicator, or no block header at all
        lines, end = self.lines, self.end
        first, widest = i + 1, 0
        while first < end and not lines[first].strip(" "):
            widest = max(widest, len(lines[first]))
            first += 1
        if first == end or lines[first].lstrip(" ")[0] == "\t":
            raise _Unsure  # libyaml: a tab where indentation is expected
        indent = self.indent(first)
        if indent <= column or widest > indent:
            raise _Unsure  # an empty block, or blank lines that set the indentation
        # The block goes on to the first line that is less indented and not blank; a blank
        # line, however short, is an empty line of the block (one pass of C-level tests).
        margin = " " * indent
        k = first
        while k < end and (lines[k].startswith(margin) or not lines[k].strip(" ")):
            k += 1
        if k < end and lines[k].lstrip(" ")[0] == "\t":
            raise _Unsure  # libyaml: a tab where indentation is expected
        body = [line[indent:] for line in lines[first:k]]
        trailing = 0
        while not body[-1]:  # the first line has text: this stops
            body.pop()
            trailing += 1
        value = "\n" * (first - i - 1) + "\n".join(body)  # blank lines before the first
        if chomp == "":
            value += "\n"
        elif chomp == "+":
            value += "\n" * (1 + trailing)
        # libyaml ends the block at the start of the line that ends it.
        return ScalarNode(IMPLICIT, value, Mark(i, at), Mark(k, 0), "|"), k


def _plain(line: str, i: int, at: int) -> tuple[ScalarNode, int]:
    comment = line.find(" #", at)
    text = (line[at:comment] if comment >= 0 else line[at:]).rstrip(" ")
    if ": " in text or text.endswith(":"):
        raise _Unsure  # a key where a value belongs: an error for PyYAML to word
    end = at + len(text)
    return ScalarNode(IMPLICIT, text, Mark(i, at), Mark(i, end), ""), end


def _quoted(line: str, i: int, at: int) -> tuple[ScalarNode, int]:
    """A one-line quoted scalar: `'...'` (`''` is a quote) or `"..."` (with escapes)."""
    quote = line[at]
    if quote == '"':
        text, end = _double_quoted(line, at + 1)
        return ScalarNode(IMPLICIT, text, Mark(i, at), Mark(i, end), quote), end
    close = line.find("'", at + 1)
    while close >= 0 and line[close + 1:close + 2] == "'":
        close = line.find("'", close + 2)
    if close < 0:
        raise _Unsure  # the scalar goes on below
    text = line[at + 1:close].replace("''", "'")
    return ScalarNode(IMPLICIT, text, Mark(i, at), Mark(i, close + 1), quote), close + 1


# YAML 1.1's escapes in double quotes, as libyaml's scanner decodes them.
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
            "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\",
            "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def _double_quoted(line: str, k: int) -> tuple[str, int]:
    """The text of a double-quoted scalar whose text starts at `k`, and where it ends."""
    parts = []
    while True:
        close = line.find('"', k)
        if close < 0:
            raise _Unsure  # the scalar goes on below
        escape = line.find("\\", k, close)
        if escape < 0:
            parts.append(line[k:close])
            return "".join(parts), close + 1
        parts.append(line[k:escape])
        letter = line[escape + 1:escape + 2]
        if letter in _ESCAPES:
            parts.append(_ESCAPES[letter])
            k = escape + 2
            continue
        digits = line[escape + 2:escape + 2 + _HEX_DIGITS.get(letter, 0)]
        if letter not in _HEX_DIGITS or len(digits) != _HEX_DIGITS[letter] \
                or digits.strip("0123456789abcdefABCDEF"):
            raise _Unsure  # an error for PyYAML to word
        code = int(digits, 16)
        if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
            raise _Unsure
        parts.append(chr(code))
        k = escape + 2 + len(digits)


def _flow(line: str, i: int, at: int) -> tuple[Node, int]:
    """A one-line `{key: value, ...}` or `[item, ...]` of plain scalars."""
    mapping = line[at] == "{"
    closing = "}" if mapping else "]"
    entries: list[Any] = []
    k = _skip_spaces(line, at + 1)
    if line[k] == closing:
        k += 1
    else:
        while True:
            first, k = _flow_scalar(line, i, k)
            if mapping:
                if line[k:k + 2] != ": ":
                    raise _Unsure
                second, k = _flow_scalar(line, i, _skip_spaces(line, k + 1))
                entries.append((first, second))
            else:
                entries.append(first)
            k = _skip_spaces(line, k)
            if line[k] == closing:
                k += 1
                break
            if line[k] != ",":
                raise _Unsure
            k = _skip_spaces(line, k + 1)
    kind = MappingNode if mapping else SequenceNode
    return kind(IMPLICIT, entries, Mark(i, at), Mark(i, k)), k


def _flow_scalar(line: str, i: int, at: int) -> tuple[ScalarNode, int]:
    match = _FLOW_PLAIN.match(line, at)
    if match is None:
        raise _Unsure
    end = match.end()
    return ScalarNode(IMPLICIT, match.group(), Mark(i, at), Mark(i, end), ""), end


def _skip_spaces(line: str, k: int) -> int:
    while k < len(line) and line[k] == " ":
        k += 1
    return k
