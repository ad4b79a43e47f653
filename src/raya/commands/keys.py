"""The `raya keys` command: the SSH keys the stack's authorized users log in with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from raya.commands.options import (
    ExampleOption,
    GithubUrlOption,
    KeysFileOption,
    RootOption,
    resolve_users,
    select_project,
)
from raya.console import err, out
from raya.errors import KeysError
from raya.model.config import load_stack_config, stack_file
from raya.model.project import DEFAULT_STACK
from raya.nodes.github_keys import GITHUB_URL, dump_keys_file, key_info

commands = typer.Typer()  # what this module adds to `raya`


@commands.command()
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
    root: RootOption = None,
    example: ExampleOption = False,
    keys_file: KeysFileOption = None,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save", help="Also write the keys to this file (`--keys-file` reads it back)."
        ),
    ] = None,
    github_url: GithubUrlOption = GITHUB_URL,
) -> None:
    """Print each authorized user's SSH keys with their type, fingerprint and comment."""
    root, stack, keys_file = select_project(root, stack, example, keys_file)
    users = resolve_users(load_stack_config(stack_file(root, stack)), keys_file, github_url)
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
