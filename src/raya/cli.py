"""The `raya` command. Library code never prints; this module and `raya.commands` do.

`raya --version`, `raya --help` and a plain `raya butane [--strict] [--pretty] [-d DIR]
[FILE]` run here without loading Typer, click or rich (most of a start-up), so they start
like Go tools. Everything else, including those commands' help and usage errors, goes to
the Typer application (`raya.commands.root.app`), which loads each command's module on
dispatch.
"""

from __future__ import annotations

import os
import sys

from raya import __version__
from raya.errors import RayaError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from pathlib import Path

    from raya.commands.root import COMMANDS, app

__all__ = ["COMMANDS", "app", "main"]


def __getattr__(name: str) -> object:
    """`raya.cli.app` and `raya.cli.COMMANDS`, loaded (with Typer) when first asked for."""
    if name in ("app", "COMMANDS"):
        from raya.commands import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        sys.stdout.write(f"raya {__version__}\n")
        return
    if args == ["--help"]:
        from raya.commands import registry

        width = _help_width()
        if width >= registry.NARROWEST:
            sys.stdout.write(registry.top_help(width))
            return
    butane = _plain_butane(args)
    if butane is None:
        from raya.commands.root import app, debug_requested

        try:
            # standalone: usage errors exit 2 with click's message; the name is `raya` also
            # under `python -m raya`.
            app(prog_name="raya")
        except RayaError as error:
            _fail(error, debug_requested())
        return
    from raya.commands.transpile import run

    try:
        run(*butane)
    except RayaError as error:
        _fail(error, debug=False)
    except KeyboardInterrupt:  # as click's standalone mode does
        sys.stderr.write("\nAborted!\n")
        sys.exit(1)
    except BrokenPipeError:  # as click does: exit 1, and no second error flushing stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _help_width() -> int:
    """The width Typer's help takes (rich's rules): $TERMINAL_WIDTH, else $COLUMNS, else
    the terminal's, else 80."""
    for variable in ("TERMINAL_WIDTH", "COLUMNS"):
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    for stream in (0, 1, 2):
        try:
            return os.get_terminal_size(stream).columns or 80
        except OSError:
            pass
    return 80


def _plain_butane(args: list[str]) -> tuple[str, bool, bool, Path | None] | None:
    """(file, strict, pretty, files_dir) of `raya butane` arguments that need nothing of
    click: known options, at most one file, an existing readable --files-dir. None for
    anything else (--help, a typo, a missing folder), which Typer then answers as always."""
    if args[:1] != ["butane"]:
        return None
    file, strict, pretty, files_dir = None, False, False, ""
    words = iter(args[1:])
    for word in words:
        if word == "--strict":
            strict = True
        elif word == "--pretty":
            pretty = True
        elif word in ("--files-dir", "-d") or word.startswith("--files-dir="):
            files_dir = word.partition("=")[2] if "=" in word else next(words, "")
            if not (files_dir and os.path.isdir(files_dir) and os.access(files_dir, os.R_OK)):
                return None
        elif file is None and (word == "-" or word[:1] not in ("-", "")):
            file = word
        else:
            return None
    if not files_dir:
        return file or "-", strict, pretty, None
    from pathlib import Path  # as Typer passes it; only when given (pathlib costs start-up)

    return file or "-", strict, pretty, Path(files_dir)


def _fail(error: RayaError, debug: bool) -> None:
    """One line on stderr (with the traceback under --debug), exit status 1."""
    # Imported here: rich costs start-up time that a successful command never needs.
    from rich.markup import escape

    from raya.console import err

    if debug:
        err.print_exception()
    err.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
    sys.exit(1)
