"""The `raya` command. Library code never prints; this module and `raya.commands` do."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from raya import __version__
from raya.errors import RayaError

app = typer.Typer(
    name="raya",
    help="Build and run a k3s cluster on Fedora CoreOS in Hetzner Cloud, named in Cloud DNS.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False)
out = Console(highlight=False)
_debug = False


def _version(value: bool) -> None:
    if value:
        out.print(f"raya {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks for errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    global _debug
    _debug = debug


# Each module adds its commands to `app` when imported.
from raya.commands import access, butane, deploy, image, keys, operate, render  # noqa: E402, F401


def main() -> None:
    try:
        # standalone: usage errors exit 2 with click's message; the name is `raya` also
        # under `python -m raya`.
        app(prog_name="raya")
    except RayaError as error:
        if _debug:
            err.print_exception()
        err.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        sys.exit(1)
