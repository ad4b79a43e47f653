"""The terminal streams the commands write to: `out` for results, `err` for the rest.

Below both `raya.cli` and `raya.commands`, so that neither imports the other for them.
Each is a rich Console made on its first use: rich costs start-up time (issue 26), and a
command writes only once its work has started.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from rich.console import Console


class _OnFirstUse:
    """Stands for a rich Console, made when one of its attributes is first asked for."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> object:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, highlight=False)
        return getattr(self._console, name)


if TYPE_CHECKING:
    err: Console
    out: Console
else:
    err = _OnFirstUse(stderr=True)
    out = _OnFirstUse(stderr=False)


def error_line(message: str) -> str:
    """`error: message` as a line for stderr, "error:" in bold red on a terminal, as rich
    styles it (unless NO_COLOR or TERM=dumb; FORCE_COLOR forces it), without loading rich."""
    environ = os.environ
    color = bool(environ.get("FORCE_COLOR")) or (
        sys.stderr.isatty() and "NO_COLOR" not in environ and environ.get("TERM") != "dumb"
    )
    label = "\x1b[1;31merror:\x1b[0m" if color else "error:"
    return f"{label} {message}\n"


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, plural unless one: "1 user", "2 users"."""
    return f"{count} {noun if count == 1 else noun + 's'}"
