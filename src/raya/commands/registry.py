"""What `raya --help` lists: the commands, their summaries, the root options.

`raya.cli` dispatches from `COMMANDS` (the module that declares each command, imported
when it runs) and `raya.commands.helptext` lists them without importing any.
tests/commands/test_cli.py checks each summary against its command's own help.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from collections.abc import Iterator

    from raya.commands.parser import Command, Group

APP_HELP = "Build and run a k3s cluster on Fedora CoreOS in Hetzner Cloud, named in Cloud DNS."
# The root's options and their help, in Typer's order (--help is click's own).
OPTIONS = {
    "--debug": "Show tracebacks for errors; accepted anywhere on the line, before a --.",
    "--version": "Print the version.",
    "--help": "Show this message and exit.",
}
# name: (module in raya.commands that defines it, the summary `raya --help` shows).
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
            "it, or, for a node the cluster autoscaler made, the one it published on its Node "
            "object."),
    "status": ("operate", "One row per node: server, snapshot against the pins, drift, DNS and "
               "Kubernetes."),
    "backup": ("backups", "Take an etcd snapshot now and upload it to the cluster's bucket."),
    "backups": ("backups", "List the cluster's etcd snapshots in object storage by control "
                "plane, each one's newest first with its age."),
    "restore": ("backups", "Restore the cluster's datastore from a snapshot: every control "
                "plane's k3s stopped, the first reset from it, the others rejoined; then "
                "the cluster's state."),
    "roll": ("operate", "Apply drift: the control planes one at a time, then the agents in "
             "batches."),
}


def load(name: str) -> Command | Group:
    """Command (or group) `name` of COMMANDS, from the module that declares it, imported now."""
    import importlib

    found: Command | Group = importlib.import_module(
        f"raya.commands.{COMMANDS[name][0]}"
    ).commands.table[name]
    return found


def every_command() -> Iterator[tuple[tuple[str, ...], Command]]:
    """Each command with its path (`("image", "pins")`), its module loaded: for the tests
    and benchmarks that go through all of them."""
    from raya.commands.parser import Group

    for name in COMMANDS:
        found = load(name)
        if isinstance(found, Group):
            yield from (((name, sub), command) for sub, command in found.commands.items())
        else:
            yield (name,), found
