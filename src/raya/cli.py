"""The `raya` command. Library code never prints; this module and `raya.commands` do.

It reads the root options (`--version`, `--help`; `--debug` anywhere before a `--`),
imports the module of the command named (`raya.commands.registry.COMMANDS`) and hands it
the rest of argv through raya's own parser (`raya.commands.parser`): no Typer, click or
rich on the way, so every command reaches its own work in a blink (issue 26). Usage errors
exit 2 with click's message (and, as click, the closest names to a mistyped command or
option), raya's own errors 1 with one line on stderr (the traceback too under --debug).
"""

from __future__ import annotations

import os
import sys

from raya import __version__
from raya.errors import RayaError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

    from raya.commands.parser import Command, Group

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run `raya` with `argv` (default: the process's arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug is wanted most once a command has failed: it may be added at the end of the line.
    end = args.index("--") if "--" in args else len(args)
    debug = "--debug" in args[:end]
    args = [word for word in args[:end] if word != "--debug"] + args[end:]
    while args[:1] and args[0].startswith("-"):
        word = args.pop(0)
        if word == "--version":  # eager, as click's: nothing else runs
            sys.stdout.write(f"raya {__version__}\n")
            return
        if word == "--help":
            return _help(None)
        from raya.commands.parser import no_such
        from raya.commands.registry import OPTIONS

        _usage_error(no_such("option", word, OPTIONS), "raya [OPTIONS] COMMAND [ARGS]...", "")
    if not args:  # as Typer's no_args_is_help: the help, exit 2
        _help(None)
        sys.exit(2)
    from raya.commands.parser import Group

    found = _find(args.pop(0), None)
    while isinstance(found, Group):
        if not args or args[0] == "--help":
            _help(found)
            if not args:
                sys.exit(2)
            return
        found = _find(args.pop(0), found)
    _run(found, args, debug)


def _find(name: str, group: Group | None) -> Command | Group:
    """Command `name` of `group`, or of raya (then loading the module that declares it)."""
    from raya.commands.parser import no_such

    if group is not None:
        if name in group.commands:
            return group.commands[name]
        _usage_error(no_such("command", name, group.commands), group.usage(), group.path)
    from raya.commands.registry import COMMANDS, load

    if name not in COMMANDS:
        _usage_error(no_such("command", name, COMMANDS), "raya [OPTIONS] COMMAND [ARGS]...", "")
    return load(name)


def _run(command: Command, args: list[str], debug: bool) -> None:
    from raya.commands.parser import UsageError

    try:
        values = command.parse(args)
        if values is None:
            return _help(command)
        command.function(**values)
    except UsageError as error:
        _usage_error(str(error), command.usage(), command.path)
    except RayaError as error:
        _fail(error, debug)
    except KeyboardInterrupt:  # as click's standalone mode does
        sys.stderr.write("\nAborted!\n")
        sys.exit(1)
    except BrokenPipeError:  # as click does: exit 1, and no second error flushing stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _help(command: Command | Group | None) -> None:
    from raya.commands import helptext
    from raya.commands.parser import Group

    width = help_width()
    if command is None:
        sys.stdout.write(helptext.top_help(width))
    elif isinstance(command, Group):
        sys.stdout.write(helptext.group_help(command, width))
    else:
        sys.stdout.write(helptext.command_help(command, width))


def _usage_error(message: str, usage: str, path: str) -> NoReturn:
    """Click's usage error: the usage line, where to find help, the error; exit status 2."""
    command = f"raya {path}".rstrip()
    sys.stderr.write(f"Usage: {usage}\nTry '{command} --help' for help.\n\nError: {message}\n")
    sys.exit(2)


def help_width() -> int:
    """The width help takes (rich's rules, as Typer's help took): $TERMINAL_WIDTH, else
    $COLUMNS, else the terminal's, else 80."""
    for variable in ("TERMINAL_WIDTH", "COLUMNS"):
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    for stream in (0, 1, 2):
        try:
            return os.get_terminal_size(stream).columns or 80
        except OSError:
            pass
    return 80


def _fail(error: RayaError, debug: bool) -> NoReturn:
    """One line on stderr (with the traceback under --debug), exit status 1."""
    from raya.console import error_line

    if debug:
        from raya.console import err

        err.print_exception()
    sys.stderr.write(error_line(str(error)))
    sys.exit(1)
