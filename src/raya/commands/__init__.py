"""CLI commands, one module per command group, each with a `commands` Typer that `raya.cli`
loads when one of them runs (see `raya.cli.COMMANDS`)."""
