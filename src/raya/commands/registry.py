"""What `raya --help` lists, free of Typer: the commands, their summaries, the root options.

The Typer application (`raya.commands.root`) is built from these, and `raya.cli` prints
`raya --help` from them without loading Typer, click or rich (start-up time), laid out
as Typer lays it out. tests/commands/test_cli.py checks the two outputs are the same
bytes at several widths, and each summary against its command's own help.
"""

from __future__ import annotations

APP_HELP = "Build and run a k3s cluster on Fedora CoreOS in Hetzner Cloud, named in Cloud DNS."
# The root's options and their help, in Typer's order (--help is click's own).
OPTIONS = {
    "--debug": "Show tracebacks for errors.",
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
# Narrower than this, Typer's table layout squeezes the name columns: raya.cli lets Typer
# lay it out then.
NARROWEST = 45


def top_help(width: int) -> str:
    """`raya --help` as Typer prints it `width` columns wide when it does not style it."""
    lines = ["", " Usage: raya [OPTIONS] COMMAND [ARGS]...", ""]
    lines += [" " + line for line in _wrap(APP_HELP, width - 2)]
    lines.append("")
    lines += _panel("Options", OPTIONS, max(map(len, OPTIONS)) + 9, width)
    summaries = {name: summary for name, (_, summary) in COMMANDS.items()}
    lines += _panel("Commands", summaries, max(map(len, COMMANDS)) + 1, width)
    return "\n".join(line.ljust(width) for line in lines) + "\n\n"


def _panel(title: str, rows: dict[str, str], column: int, width: int) -> list[str]:
    """A rounded box named `title`: each name, then its help wrapped beside it."""
    inner = width - 4  # the borders and a space inside each
    lines = ["╭─ " + title + " " + "─" * (width - len(title) - 5) + "╮"]
    for name, text in rows.items():
        for index, line in enumerate(_wrap(text, inner - column - 1)):
            beside = name if index == 0 else ""
            lines.append("│ " + f"{beside:<{column}} {line}".ljust(inner) + " │")
    lines.append("╰" + "─" * (width - 2) + "╯")
    return lines


def _wrap(text: str, width: int) -> list[str]:
    """Words filled greedily into lines of at most `width` characters, as rich wraps."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines
