"""A systemd unit read the way Ignition reads it: go-systemd's unit deserializer.

Ignition validates unit and drop-in contents with github.com/coreos/go-systemd's
`unit.Deserialize` (unit/deserialize.go) over a strings.Reader, and reports its error as
"invalid unit content: ...". That lexer has its own rules, which this module follows
step by step rather than systemd's:

- only `\\n` ends a line (its `\\r` stays on it); form feeds, NEL or U+2028 do not;
- a `\\r` or `\\n` inside an option name is an error ("unexpected newline ...");
- "line too long" is judged on bufio.Reader's 4096-byte buffer: before each step, if
  2048 or more bytes are buffered and the next 2048 hold no `\\r` or `\\n`, it fails.
  The buffer is modelled exactly, since whether a long line is caught depends on it.
"""

from __future__ import annotations

import functools
import unicodedata

LINE_MAX = 2048  # SYSTEMD_LINE_MAX
_BUFFER = 4096  # bufio.NewReader's default size
_LATIN1_SPACE = frozenset("\t\n\v\f\r \x85\xa0")


class UnitSyntaxError(ValueError):
    pass


def go_is_space(char: str) -> bool:
    """Go's unicode.IsSpace: Latin-1's spaces, else the White_Space property."""
    if ord(char) <= 0xFF:
        return char in _LATIN1_SPACE
    return char.isspace() or unicodedata.category(char) in ("Zs", "Zl", "Zp")


# Every character go_is_space accepts, for str.strip (Go's strings.TrimSpace): Latin-1's
# spaces and Unicode's White_Space, written out (tests/butane/test_unitfile.py derives it
# from go_is_space; deriving it here cost a tenth of `raya butane`'s start-up).
_GO_SPACES = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def _go_trim_space(text: str) -> str:
    return text.strip(_GO_SPACES)


class _Reader:
    """bufio.Reader over a strings.Reader, tracked as offsets into the data."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.r = 0  # next byte to read
        self.w = 0  # end of the buffered bytes
        self.last = 0  # size of the last rune read, for UnreadRune

    def _fill(self) -> None:
        self.w = min(len(self.data), self.r + _BUFFER)

    def buffered(self) -> int:
        return self.w - self.r

    def read_rune(self) -> str | None:
        if self.w - self.r < 4 and not self._full_rune() and self.w < len(self.data):
            self._fill()
        if self.r == self.w:
            return None
        head = self.data[self.r:self.w]
        for size in (1, 2, 3, 4):
            try:
                char = head[:size].decode("utf-8")
            except UnicodeDecodeError:
                continue
            self.r += size
            self.last = size
            return char
        self.r += 1  # Go's utf8.RuneError, one byte wide
        self.last = 1
        return "\ufffd"

    def _full_rune(self) -> bool:
        """utf8.FullRune on the buffered bytes: enough of them for one rune (or an error)."""
        if self.r == self.w:
            return False
        lead = self.data[self.r]
        need = 1 if lead < 0xC0 or lead >= 0xF8 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        return self.w - self.r >= need

    def unread_rune(self) -> None:
        self.r -= self.last

    def read_through(self, delim: bytes) -> tuple[bytes, bool]:
        """ReadBytes(delim): the bytes up to and including it, and whether EOF came first."""
        start = self.r
        while True:
            found = self.data.find(delim, self.r, self.w)
            if found >= 0:
                self.r = found + 1
                return self.data[start:self.r], False
            if self.w == len(self.data):
                self.r = self.w
                return self.data[start:self.r], True
            if self.w - self.r >= _BUFFER:  # ErrBufferFull: collect and read on
                self.r = self.w
            self._fill()


@functools.lru_cache(maxsize=256)  # nodes of one cluster share their units
def deserialize(contents: str) -> tuple[tuple[str, str], ...]:
    """(section, option name) pairs in order; UnitSyntaxError as go-systemd fails."""
    reader = _Reader(contents.encode("utf-8", "surrogateescape"))
    options: list[tuple[str, str]] = []

    def to_eol() -> tuple[bytes, bool]:
        line, eof = reader.read_through(b"\n")
        # go-systemd trims "\r" before "\n": a CRLF line keeps its "\r" (so a "\\" before
        # it continues nothing).
        return line.removesuffix(b"\r").removesuffix(b"\n"), eof

    def ignore_line(after: object) -> object:
        def step() -> object:
            while True:
                line, _ = to_eol()
                if not line.removesuffix(b" ").endswith(b"\\"):
                    return after
        return step

    def next_section() -> object:
        char = reader.read_rune()
        if char is None:
            return None
        if char == "[":
            return section_name
        if char in "#;":
            return ignore_line(next_section)
        return next_section

    def section_name() -> object:
        raw, eof = reader.read_through(b"]")
        if eof and not raw.endswith(b"]"):
            raise UnitSyntaxError("unable to find end of section")
        section = raw[:-1].decode("utf-8", "surrogateescape")
        garbage, _ = to_eol()
        if _go_trim_space(garbage.decode("utf-8", "replace")):
            raise UnitSyntaxError(f"found garbage after section name {section}")
        return lambda: section_or_option(section)

    def section_or_option(section: str) -> object:
        char = reader.read_rune()
        if char is None:
            return None
        if go_is_space(char):
            return lambda: section_or_option(section)
        if char == "[":
            return section_name
        if char in "#;":
            return ignore_line(lambda: section_or_option(section))
        reader.unread_rune()
        return lambda: option_name(section)

    def option_name(section: str) -> object:
        # Fast path: the name ends within the buffer, so rune-by-rune reading would
        # never refill it ("=", "\r" and "\n" are never part of a multi-byte rune).
        data, start = reader.data, reader.r
        ends = [i for i in (data.find(b"=", start, reader.w), data.find(b"\n", start, reader.w),
                            data.find(b"\r", start, reader.w)) if i >= 0]
        if ends and min(ends) <= reader.w - 4:
            end = min(ends)
            reader.r = end + 1
            if data[end] != ord("="):
                raise UnitSyntaxError("unexpected newline encountered while parsing option name")
            name_text = data[start:end].decode("utf-8", "replace")
            options.append((section, _go_trim_space(name_text)))
            return lambda: option_value(section)
        name: list[str] = []
        while True:
            char = reader.read_rune()
            if char is None:
                raise UnitSyntaxError("EOF")  # io.EOF, as go-systemd returns it
            if char in "\r\n":
                raise UnitSyntaxError("unexpected newline encountered while parsing option name")
            if char == "=":
                break
            name.append(char)
        options.append((section, _go_trim_space("".join(name))))
        return lambda: option_value(section)

    def option_value(section: str) -> object:
        # One line per step: a continuation is a new step (and a new length check).
        line, _ = to_eol()
        if _go_trim_space(line.decode("utf-8", "replace")) and line.endswith(b"\\"):
            return lambda: option_value(section)
        return lambda: section_or_option(section)

    step: object = next_section
    while callable(step):
        if reader.buffered() >= LINE_MAX:
            ahead = reader.data[reader.r:reader.r + LINE_MAX]
            if b"\r" not in ahead and b"\n" not in ahead:
                raise UnitSyntaxError(f"line too long (max {LINE_MAX} bytes)")
        step = step()
    return tuple(options)
