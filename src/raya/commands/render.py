"""The `raya render` command: every node's Butane and Ignition config, offline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from raya.cli import app, err, out
from raya.errors import RenderError
from raya.github_keys import GITHUB_URL, UserKeys, fetch_keys, load_keys_file, select_users
from raya.identity import generate_example_secrets
from raya.project import DEFAULT_STACK, EXAMPLE_ROOT, EXAMPLE_STACK, find_root, load_cluster
from raya.render import IGNITION_LIMIT, RenderedNode, keys_inline, render_cluster

EXAMPLE_KEYS = EXAMPLE_ROOT / "keys.json"
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
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="Project folder, holding Pulumi.yaml.",
            show_default="the nearest one at or above the current folder",
        ),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write <node>.bu and <node>.ign to.")
    ] = Path("out"),
    keys_file: Annotated[
        Path | None,
        typer.Option(
            "--keys-file",
            help="Read the SSH keys from this file (`raya keys --save`) instead of GitHub.",
        ),
    ] = None,
    example: Annotated[
        bool,
        typer.Option(
            "--example",
            help="Render the bundled example (control plane + 3 agents, example keys); "
            "no account, no network.",
        ),
    ] = False,
    github_url: Annotated[
        str,
        typer.Option(
            "--github-url", help="Base URL serving <handle>.keys (a mirror, or a test server)."
        ),
    ] = GITHUB_URL,
) -> None:
    """Render every node's Butane and Ignition config and print their sizes.

    The secrets are throwaway ones generated on the spot, and said so: the real join token,
    CAs and service account keys exist only in the deployment's state.
    """
    if example:
        if root is not None or stack is not None:
            raise typer.BadParameter("--example is its own project; it takes no --root or --stack")
        root, stack, keys_file = EXAMPLE_ROOT, EXAMPLE_STACK, keys_file or EXAMPLE_KEYS
    cluster = load_cluster(root or find_root(Path.cwd()), stack or DEFAULT_STACK)
    users: tuple[UserKeys, ...]
    if keys_file is not None:
        handles = cluster.config.authorized_users
        users = select_users(load_keys_file(keys_file), handles, str(keys_file))
    else:
        with err.status(f"fetching the keys of {len(cluster.config.authorized_users)} users..."):
            users = fetch_keys(cluster.config.authorized_users, github_url)
    err.print(THROWAWAY, markup=False, soft_wrap=True)
    rendered = render_cluster(cluster, generate_example_secrets(), users, keys_base_url=github_url)
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
