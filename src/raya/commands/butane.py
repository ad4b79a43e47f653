"""The `raya butane` command: Butane YAML → Ignition JSON, like the `butane` CLI.

It reads the config, then loads the transpiler, so that an unreadable file fails before
the transpiler's import.
"""

from __future__ import annotations

import sys

from raya.commands.parser import Argument, Commands, Option
from raya.errors import ButaneError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from pathlib import Path

commands = Commands()  # what this module adds to `raya`


@commands.command(
    Argument("file", help="Butane config to transpile; '-' or nothing reads stdin.",
             default="-"),
    Option("--strict", kind="flag", help="Fail on warnings too (raya renders always do)."),
    Option("--pretty", kind="flag", help="Indent the JSON output."),
    Option("--files-dir", "-d", kind="directory",
           help="Directory that `local`, `contents_local` and `trees` paths are relative to."),
    name="butane",
)  # fmt: skip
def butane_command(*, file: str, strict: bool, pretty: bool, files_dir: Path | None) -> None:
    """Transpile a Butane config (variant fcos 1.4.0-1.6.0) to Ignition JSON on stdout."""
    source = "<stdin>" if file == "-" else file
    try:
        if file == "-":
            text = sys.stdin.read()
        else:
            with open(file, encoding="utf-8") as stream:
                text = stream.read()
    except (OSError, UnicodeDecodeError) as error:
        if isinstance(error, OSError) and error.filename == file:
            from pathlib import PurePath  # named as click's Path(file) named it: normalized

            error.filename = str(PurePath(file))
        raise ButaneError(f"cannot read Butane config {source}: {error}") from error
    from raya.butane import ButaneDiagnostics, to_json, translate
    from raya.butane.report import render

    result = translate(text, files_dir)
    # Plain writes, not rich: the JSON must go out byte for byte, and Butane's
    # "error[$.path]" headers would be read as rich markup.
    failing = result.diagnostics if strict else result.errors
    if result.diagnostics:
        sys.stderr.write(render(source, text, result.diagnostics))
    if result.config is None or failing:
        if result.config is not None:
            sys.stderr.write("Config produced warnings and --strict was specified\n")
        raise ButaneDiagnostics(source, text, failing or result.diagnostics).summary()
    sys.stdout.write(to_json(result.config, pretty=pretty) + "\n")
