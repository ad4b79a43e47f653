"""The `raya render` command: every node's Butane and Ignition config, offline."""

from __future__ import annotations

from raya.commands.options import EXAMPLE, ROOT, select_project
from raya.commands.parser import Commands, Option
from raya.defaults import DEFAULT_STACK
from raya.errors import RenderError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from pathlib import Path

    from raya.nodes.render import RenderedNode

# Stands for the first control plane's volume (the next ones count up from it), whose id
# Hetzner decides when it is created.
EXAMPLE_VOLUME_ID = "100000001"
THROWAWAY = (
    "secrets: THROWAWAY, generated for this render only (join token, CAs, service account "
    "keys, the cluster's Hetzner token, SSH host keys, object storage keys), and made-up "
    f"volume ids (from {EXAMPLE_VOLUME_ID}); these configs show what the nodes get but cannot "
    "join a real cluster. `raya up` renders with the stack's own."
)

commands = Commands()  # what this module adds to `raya`


@commands.command(
    Option("--stack", "-s", kind="stack", help="Stack to render.", show_default=DEFAULT_STACK),
    ROOT,
    Option("--out", "-o", kind="path", help="Folder to write <node>.bu and <node>.ign to.",
           default="out", dest="out_dir"),
    EXAMPLE,
)  # fmt: skip
def render(*, stack: str | None, root: Path | None, out_dir: Path, example: bool) -> None:
    """Render every node's Butane and Ignition config and print their sizes.

    The secrets are throwaway ones generated on the spot, and said so: the real join token,
    CAs and service account keys exist only in the deployment's state.
    """
    root, stack, _ = select_project(root, stack, example, None)
    from raya.console import err, out
    from raya.model.pins import load_chart_pins
    from raya.model.project import load_cluster
    from raya.nodes.identity import generate_example_secrets
    from raya.nodes.render import IGNITION_LIMIT, render_cluster

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
    from raya.files import write_atomically

    try:
        folder.mkdir(parents=True, exist_ok=True)
        for node in rendered:
            for suffix, data in ((".bu", node.butane.encode()), (".ign", node.ignition)):
                write_atomically(folder / f"{node.node.name}{suffix}", data, 0o600)
    except OSError as error:
        raise RenderError(f"{error.filename}: cannot write: {error.strerror}") from None
