"""The `raya butane` command: Butane YAML → Ignition JSON, like the `butane` CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from raya.commands.transpile import run

commands = typer.Typer()  # what this module adds to `raya`


@commands.command("butane")
def butane_command(
    file: Annotated[
        str, typer.Argument(help="Butane config to transpile; '-' or nothing reads stdin.")
    ] = "-",
    strict: Annotated[
        bool, typer.Option("--strict", help="Fail on warnings too (raya renders always do).")
    ] = False,
    pretty: Annotated[bool, typer.Option("--pretty", help="Indent the JSON output.")] = False,
    files_dir: Annotated[
        Path | None,
        typer.Option(
            "--files-dir", "-d", help="Directory that `local`, `contents_local` and `trees` "
            "paths are relative to.", file_okay=False, exists=True,
        ),
    ] = None,
) -> None:
    """Transpile a Butane config (variant fcos 1.4.0-1.6.0) to Ignition JSON on stdout."""
    run(file, strict, pretty, files_dir)
