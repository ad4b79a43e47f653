"""`raya preview | up | destroy`: deploy the stack through Pulumi's Automation API."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated

import typer

from raya.commands.options import RootOption, project_root
from raya.console import err, out
from raya.errors import DeployError
from raya.model.project import DEFAULT_STACK

commands = typer.Typer()  # what this module adds to `raya`

if TYPE_CHECKING:
    from raya.cloud.deploy import Action, Result

StackOption = Annotated[
    str, typer.Option("--stack", "-s", help="The stack (Pulumi.<stack>.yaml).")
]


def _progress(line: str) -> None:
    # Lines of the Pulumi CLI's own display, in which secrets read `[secret]`.
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def deploy_module(command: str) -> ModuleType:
    """`raya.cloud.deploy`, imported on use: the rest of raya works without Pulumi's packages (the
    [deploy] extra)."""
    try:
        from raya.cloud import deploy
    except ImportError as error:
        raise DeployError(
            f"raya {command} needs the Pulumi packages ({error.name} is missing): "
            "install raya's [deploy] extra, e.g. `scripts/bootstrap deploy`"
        ) from None
    return deploy


def _run(
    action: Action,
    stack: str,
    root: Path | None,
    *,
    replace: list[str] | None = None,
    no_destroy_protected: bool = False,
    delete_backups: bool = False,
) -> Result:
    result: Result = deploy_module(action).run(
        action,
        project_root(root),
        stack,
        _progress,
        replace=replace or (),
        no_destroy_protected=no_destroy_protected,
        delete_backups=delete_backups,
    )
    changes = ", ".join(f"{op} {count}" for op, count in result.changes.items()) or "none"
    out.print(f"{action} of stack {stack}: {changes}", markup=False)
    for node, parts in result.drift.items():
        out.print(
            f"drift: {node} runs other {', '.join(parts)} than the inputs render; "
            "left as it is (docs/deploy.md, Day two)",
            markup=False,
            soft_wrap=True,
        )
    return result


@commands.command()
def preview(stack: StackOption = DEFAULT_STACK, root: RootOption = None) -> None:
    """Show what `raya up` would change, and each node's drift, without changing anything."""
    _run("preview", stack, root)


@commands.command()
def up(
    stack: StackOption = DEFAULT_STACK,
    root: RootOption = None,
    no_destroy_protected: Annotated[
        bool,
        typer.Option(
            "--no-destroy-protected",
            help="Preview first; fail, changing nothing, if the preview replaces or deletes "
            "the control plane, its volume, the network or the DNS zone (what CI runs).",
        ),
    ] = False,
    replace: Annotated[
        list[str] | None,
        typer.Option(
            "--replace",
            help="Re-create this node's server (control-plane, agent-<i>) with what the inputs "
            "render, applying its drift: the old server is shut down and deleted first. "
            "Repeat for more; `raya roll` also drains an agent first.",
        ),
    ] = None,
) -> None:
    """Create or update the cluster: image lookup, network, servers, PKI, DNS, service accounts.

    Servers are never replaced for a change of users, image or config: `raya up` lists it as
    drift, per node, and leaves them running, unless named with --replace.
    """
    result = _run(
        "up", stack, root, replace=replace, no_destroy_protected=no_destroy_protected
    )
    for name, value in result.outputs.items():
        out.print(f"{name}: {value}", markup=False, soft_wrap=True)


@commands.command()
def destroy(
    stack: StackOption = DEFAULT_STACK,
    root: RootOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    delete_backups: Annotated[
        bool,
        typer.Option(
            "--delete-backups", help="Delete the backups' bucket and every snapshot in it too."
        ),
    ] = False,
) -> None:
    """Delete every resource of the stack: servers, volume, network, DNS zone, service accounts.

    Protected ones included (the control plane and its volume): the confirmation is the
    protection. The backups' bucket and its snapshots stay unless --delete-backups."""
    what = "its servers, DNS zone" + (" and every backup" if delete_backups else "")
    if not yes and not typer.confirm(
        f"Destroy every resource of stack {stack}, {what} included?", err=True
    ):
        err.print("nothing destroyed")
        raise typer.Exit(1)
    _run("destroy", stack, root, delete_backups=delete_backups)
    if delete_backups:
        err.print("deleted the backups' bucket and its snapshots")
    else:
        err.print(
            "kept the backups' bucket and its snapshots: a bucket raya made is no longer in "
            "the stack, delete it in Google Cloud Storage when it is not needed (or destroy "
            "with --delete-backups next time)",
            soft_wrap=True,
        )
