"""The `raya` Typer application, which `raya.cli.main` runs for all but its fast paths.

Commands are loaded on dispatch: `raya keys` imports nothing of Pulumi. The listing of
`raya --help` comes from `raya.commands.registry` without importing any command (and
`raya.cli` prints it from there without Typer at all).
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from raya import __version__
from raya.commands.registry import APP_HELP, COMMANDS, OPTIONS

__all__ = ["COMMANDS", "app", "debug_requested"]


class _LazyGroup(TyperGroup):
    """The root group: each command's module is imported when that command runs.

    (`ctx` is click's Context, which typer may vendor privately: hence `Any`.)
    """

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> TyperCommand | TyperGroup | None:
        if cmd_name not in COMMANDS:
            return None
        module, summary = COMMANDS[cmd_name]
        if self._listing:  # the list in `raya --help` needs names and summaries only
            return TyperCommand(cmd_name, help=summary)
        commands = importlib.import_module(f"raya.commands.{module}").commands
        found = typer.main.get_group(commands).commands[cmd_name]
        assert isinstance(found, TyperCommand | TyperGroup), cmd_name
        return found

    def get_help(self, ctx: Any) -> str:
        self._listing = True
        try:
            return super().get_help(ctx)
        finally:
            self._listing = False


app = typer.Typer(
    cls=_LazyGroup,
    name="raya",
    help=APP_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_debug = False  # --debug: raya.cli.main shows the traceback of an error


def debug_requested() -> bool:
    return _debug


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"raya {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help=OPTIONS["--debug"])
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True,
                     help=OPTIONS["--version"]),
    ] = False,
) -> None:
    global _debug
    _debug = debug
