"""The `raya keys` command: the SSH keys the stack's authorized users log in with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from raya.cli import app, err, out
from raya.config import load_stack_config, stack_file
from raya.errors import KeysError
from raya.github_keys import (
    GITHUB_URL,
    UserKeys,
    dump_keys_file,
    fetch_keys,
    key_info,
    load_keys_file,
    select_users,
)
from raya.project import DEFAULT_STACK, EXAMPLE_ROOT, EXAMPLE_STACK, find_root

EXAMPLE_KEYS = EXAMPLE_ROOT / "keys.json"


@app.command()
def keys(
    stack: Annotated[
        str | None,
        typer.Option(
            "--stack",
            "-s",
            help="Stack whose raya:authorizedUsers to resolve.",
            show_default=DEFAULT_STACK,
        ),
    ] = None,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="Project folder, holding Pulumi.yaml.",
            show_default="the nearest one at or above the current folder",
        ),
    ] = None,
    example: Annotated[
        bool,
        typer.Option(
            "--example", help="Use the bundled example project and its keys file (offline)."
        ),
    ] = False,
    keys_file: Annotated[
        Path | None,
        typer.Option(
            "--keys-file",
            help="Read the keys from this file (written by --save) instead of GitHub.",
        ),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save", help="Also write the keys to this file, for `raya render --keys-file`."
        ),
    ] = None,
    github_url: Annotated[
        str,
        typer.Option(
            "--github-url", help="Base URL serving <handle>.keys (a mirror, or a test server)."
        ),
    ] = GITHUB_URL,
) -> None:
    """Print each authorized user's SSH keys with their type, fingerprint and comment."""
    if example:
        if root is not None or stack is not None:
            raise typer.BadParameter("--example is its own project; it takes no --root or --stack")
        root, stack, keys_file = EXAMPLE_ROOT, EXAMPLE_STACK, keys_file or EXAMPLE_KEYS
    config = load_stack_config(stack_file(root or find_root(Path.cwd()), stack or DEFAULT_STACK))
    users: tuple[UserKeys, ...]
    if keys_file is not None:
        users = select_users(load_keys_file(keys_file), config.authorized_users, str(keys_file))
    else:
        with err.status(f"fetching the keys of {len(config.authorized_users)} users..."):
            users = fetch_keys(config.authorized_users, github_url)
    width = max(len(user.handle) for user in users)
    for user in users:
        for key in user.keys:
            info = key_info(key)
            line = f"{user.handle:<{width}}  {info.type:<11}  {info.fingerprint}  {info.comment}"
            out.print(line.rstrip(), markup=False, soft_wrap=True)
    if save is not None:
        try:
            save.write_text(dump_keys_file(users), encoding="utf-8")
        except OSError as error:
            raise KeysError(f"{save}: cannot write the keys file: {error.strerror}") from None
        count = sum(len(user.keys) for user in users)
        err.print(
            f"wrote {count} keys of {len(users)} users to {save}", markup=False, soft_wrap=True
        )
