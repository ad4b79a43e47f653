"""The `raya` Typer application, which `raya.cli.main` runs for all but its fast paths.

Commands are loaded on dispatch: `raya keys` imports nothing of Pulumi, `raya --help`
lists every command from `COMMANDS` without importing any.
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from raya import __version__

# name: (module in raya.commands that defines it, the summary `raya --help` shows).
# tests/commands/test_cli.py checks each summary against the command's own help.
COMMANDS = {
    "butane": ("butane", "Transpile a Butane config (variant fcos 1.4.0-1.6.0) to Ignition "
               "JSON on stdout."),
    "preview": ("deploy", "Show what `raya up` would change, and each node's drift, without "
                "changing anything."),
    "up": ("deploy", "Create or update the cluster: image lookup, network, servers, PKI, DNS, "
           "service accounts."),
    "destroy": ("deploy", "Delete every resource of the stack: servers, volume, network, DNS "
                "zone, service accounts."),
    "keys": ("keys", "Print each authorized user's SSH keys with their type, fingerprint and "
             "comment."),
    "render": ("render", "Render every node's Butane and Ignition config and print their "
               "sizes."),
    "image": ("image", "Build the Fedora CoreOS snapshot (k3s included) and keep its pins "
              "current."),
    "kubeconfig": ("access", "Write the cluster's admin kubeconfig, made from the deployment's "
                   "own PKI (no SSH)."),
    "ssh": ("access", "SSH to a node as core, trusting only the host key the deployment gave "
            "it."),
    "status": ("operate", "One row per node: server, snapshot against the pins, drift, DNS and "
               "Kubernetes."),
    "backup": ("backups", "Take an etcd snapshot now and upload it to the cluster's bucket."),
    "backups": ("backups", "List the cluster's etcd snapshots in object storage, newest first."),
    "restore": ("backups", "Restore the cluster's datastore from a snapshot: every control "
                "plane's k3s stopped, the first reset from it, the others rejoined; then "
                "the cluster's state."),
    "roll": ("operate", "Apply drift one node at a time: the control plane first, then the "
             "agents."),
}


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
    help="Build and run a k3s cluster on Fedora CoreOS in Hetzner Cloud, named in Cloud DNS.",
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
        bool, typer.Option("--debug", help="Show tracebacks for errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    global _debug
    _debug = debug
