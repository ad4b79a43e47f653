"""CLI commands, one module per command group, each with a `commands` Typer that the
application in `raya.commands.root` loads when one of them runs (see its `COMMANDS`)."""
