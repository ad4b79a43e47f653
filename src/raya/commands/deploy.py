"""`raya preview | up | destroy`: deploy the stack through Pulumi's Automation API."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from raya.commands.options import RootOption, project_root
from raya.console import err, out
from raya.errors import DeployError
from raya.project import DEFAULT_STACK

commands = typer.Typer()  # what this module adds to `raya`

if TYPE_CHECKING:
    from raya.deploy import Action, Result

StackOption = Annotated[
    str, typer.Option("--stack", "-s", help="Stack to deploy (Pulumi.<stack>.yaml).")
]



def _progress(line: str) -> None:
    # Lines of the Pulumi CLI's own display, in which secrets read `[secret]`.
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def _run(action: Action, stack: str, root: Path | None) -> Result:
    # Imported here: the rest of raya works without Pulumi's packages (the [deploy] extra).
    try:
        from raya import deploy
    except ImportError as error:
        raise DeployError(
            f"raya {action} needs the Pulumi packages ({error.name} is missing): "
            "install raya's [deploy] extra, e.g. `scripts/bootstrap deploy`"
        ) from None
    result = deploy.run(action, project_root(root), stack, _progress)
    changes = ", ".join(f"{op} {count}" for op, count in result.changes.items()) or "none"
    out.print(f"{action} of stack {stack}: {changes}", markup=False)
    return result


@commands.command()
def preview(stack: StackOption = DEFAULT_STACK, root: RootOption = None) -> None:
    """Show what `raya up` would change, without changing anything."""
    _run("preview", stack, root)


@commands.command()
def up(stack: StackOption = DEFAULT_STACK, root: RootOption = None) -> None:
    """Create or update the cluster: image lookup, network, servers, PKI, DNS, service accounts."""
    result = _run("up", stack, root)
    for name, value in result.outputs.items():
        out.print(f"{name}: {value}", markup=False, soft_wrap=True)


@commands.command()
def destroy(
    stack: StackOption = DEFAULT_STACK,
    root: RootOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every resource of the stack: servers, network, DNS zone, service accounts."""
    if not yes and not typer.confirm(
        f"Destroy every resource of stack {stack}, its servers and DNS zone included?", err=True
    ):
        err.print("nothing destroyed")
        raise typer.Exit(1)
    _run("destroy", stack, root)
