"""The `raya butane` command: Butane YAML → Ignition JSON, like the `butane` CLI."""

from __future__ import annotations

from raya.commands.parser import Argument, Commands, Option

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
    from raya.commands.transpile import run

    run(file, strict, pretty, files_dir)
