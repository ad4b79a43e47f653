"""The `raya render` command: every node's Butane and Ignition config, offline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from raya.cli import app, err, out
from raya.commands.options import (
    ExampleOption,
    GithubUrlOption,
    KeysFileOption,
    RootOption,
    resolve_users,
    select_project,
)
from raya.errors import RenderError
from raya.github_keys import GITHUB_URL
from raya.identity import generate_example_secrets
from raya.pins import load_chart_pins
from raya.project import DEFAULT_STACK, load_cluster
from raya.render import IGNITION_LIMIT, RenderedNode, keys_inline, render_cluster

THROWAWAY = (
    "secrets: THROWAWAY, generated for this render only (join token, CAs, service account "
    "keys); these configs show what the nodes get but cannot join a real cluster. "
    "`raya up` renders with the stack's own secrets."
)


@app.command()
def render(
    stack: Annotated[
        str | None,
        typer.Option("--stack", "-s", help="Stack to render.", show_default=DEFAULT_STACK),
    ] = None,
    root: RootOption = None,
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write <node>.bu and <node>.ign to.")
    ] = Path("out"),
    keys_file: KeysFileOption = None,
    example: ExampleOption = False,
    github_url: GithubUrlOption = GITHUB_URL,
) -> None:
    """Render every node's Butane and Ignition config and print their sizes.

    The secrets are throwaway ones generated on the spot, and said so: the real join token,
    CAs and service account keys exist only in the deployment's state.
    """
    root, stack, keys_file = select_project(root, stack, example, keys_file)
    cluster = load_cluster(root, stack)
    users = resolve_users(cluster.config, keys_file, github_url)
    err.print(THROWAWAY, markup=False, soft_wrap=True)
    charts = load_chart_pins(root)
    rendered = render_cluster(
        cluster, generate_example_secrets(), users, charts=charts, keys_base_url=github_url
    )
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
    keys = sum(len(user.keys) for user in users)
    if keys_inline(users):
        how = f"{keys} keys of {len(users)} users inline"
    else:
        how = (
            f"{keys} keys of {len(users)} users, too many to carry inline: fetched at first "
            f"boot from {github_url.rstrip('/')}/<handle>.keys, pinned by sha256"
        )
    err.print(f"SSH keys: {how}", markup=False, soft_wrap=True)
    err.print(f"wrote {len(rendered)} nodes' .bu and .ign files to {out_dir}", markup=False)


def _write(folder: Path, rendered: tuple[RenderedNode, ...]) -> None:
    """Each node's files, readable by their owner only: they hold (throwaway) secrets."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for node in rendered:
            for suffix, data in ((".bu", node.butane.encode()), (".ign", node.ignition)):
                path = folder / f"{node.node.name}{suffix}"
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(descriptor, "wb") as file:
                    file.write(data)
                path.chmod(0o600)
    except OSError as error:
        raise RenderError(f"{error.filename}: cannot write: {error.strerror}") from None
