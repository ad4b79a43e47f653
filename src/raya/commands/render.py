"""The `raya render` command: every node's Butane and Ignition config, offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from raya.commands.options import ExampleOption, RootOption, select_project
from raya.console import err, out
from raya.errors import RenderError
from raya.files import write_atomically
from raya.model.pins import load_chart_pins
from raya.model.project import DEFAULT_STACK, load_cluster
from raya.nodes.identity import generate_example_secrets
from raya.nodes.render import IGNITION_LIMIT, RenderedNode, render_cluster

# Stands for the first control plane's volume (the next ones count up from it), whose id
# Hetzner decides when it is created.
EXAMPLE_VOLUME_ID = "100000001"
THROWAWAY = (
    "secrets: THROWAWAY, generated for this render only (join token, CAs, service account "
    "keys, the cluster's Hetzner token, SSH host keys, object storage keys), and made-up "
    f"volume ids (from {EXAMPLE_VOLUME_ID}); these configs show what the nodes get but cannot "
    "join a real cluster. `raya up` renders with the stack's own."
)

commands = typer.Typer()  # what this module adds to `raya`


@commands.command()
def render(
    stack: Annotated[
        str | None,
        typer.Option("--stack", "-s", help="Stack to render.", show_default=DEFAULT_STACK),
    ] = None,
    root: RootOption = None,
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write <node>.bu and <node>.ign to.")
    ] = Path("out"),
    example: ExampleOption = False,
) -> None:
    """Render every node's Butane and Ignition config and print their sizes.

    The secrets are throwaway ones generated on the spot, and said so: the real join token,
    CAs and service account keys exist only in the deployment's state.
    """
    root, stack, _ = select_project(root, stack, example, None)
    cluster = load_cluster(root, stack)
    err.print(THROWAWAY, markup=False, soft_wrap=True)
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    charts = load_chart_pins(root)
    volumes = {
        node.name: str(int(EXAMPLE_VOLUME_ID) + k) for k, node in enumerate(cluster.control_planes)
    }
    rendered = render_cluster(cluster, secrets, charts=charts, volume_id=volumes)
    _write(out_dir, rendered)

    rows = [("node", "role", "private address", "DNS name", f"Ignition / {IGNITION_LIMIT:,} B")]
    for node in rendered:
        size = len(node.ignition)
        rows.append(
            (
                node.node.name,
                node.node.role,
                str(node.node.private_ip),
                cluster.dns_name(node.node),
                f"{size:,} B ({size / IGNITION_LIMIT:.0%})",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.print(line.rstrip(), markup=False, soft_wrap=True)
    users = cluster.config.authorized_users
    err.print(
        f"SSH keys: fetched by every node at boot and every 15 minutes from GitHub, for "
        f"{len(users)} users ({', '.join(users)})",
        markup=False,
        soft_wrap=True,
    )
    err.print(f"wrote {len(rendered)} nodes' .bu and .ign files to {out_dir}", markup=False)


def _write(folder: Path, rendered: tuple[RenderedNode, ...]) -> None:
    """Each node's files, readable by their owner only: they hold (throwaway) secrets."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for node in rendered:
            for suffix, data in ((".bu", node.butane.encode()), (".ign", node.ignition)):
                write_atomically(folder / f"{node.node.name}{suffix}", data, 0o600)
    except OSError as error:
        raise RenderError(f"{error.filename}: cannot write: {error.strerror}") from None
