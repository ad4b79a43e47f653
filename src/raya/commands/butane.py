"""The `raya butane` command: Butane YAML → Ignition JSON, like the `butane` CLI."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from raya.butane import ButaneDiagnostics, to_json, translate
from raya.butane.report import render
from raya.errors import ButaneError

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
    source = "<stdin>" if file == "-" else file
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ButaneError(f"cannot read Butane config {source}: {error}") from error
    result = translate(text, files_dir)
    # Plain writes, not rich: the JSON must go out byte for byte, and Butane's
    # "error[$.path]" headers would be read as rich markup.
    failing = [d for d in result.diagnostics if strict or d.severity == "error"]
    if result.diagnostics:
        sys.stderr.write(render(source, text, result.diagnostics))
    if result.config is None or failing:
        if result.config is not None:
            sys.stderr.write("Config produced warnings and --strict was specified\n")
        raise ButaneDiagnostics(source, text, failing or result.diagnostics).summary()
    sys.stdout.write(to_json(result.config, pretty=pretty) + "\n")
