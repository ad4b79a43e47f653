"""Options and project selection shared by the commands that read a stack."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from raya.console import err
from raya.model.config import StackConfig
from raya.model.project import DEFAULT_STACK, EXAMPLE_KEYS, EXAMPLE_ROOT, EXAMPLE_STACK, find_root
from raya.nodes.github_keys import GITHUB_URL, UserKeys, fetch_keys, load_keys_file, select_users

RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        help="Project folder, holding Pulumi.yaml.",
        show_default="the nearest one at or above the current folder",
    ),
]
ExampleOption = Annotated[
    bool,
    typer.Option(
        "--example",
        help="Use the bundled example project (control plane + 3 agents; `raya keys` reads "
        "its example keys file): no account, no network.",
    ),
]
KeysFileOption = Annotated[
    Path | None,
    typer.Option(
        "--keys-file",
        help="Read the SSH keys from this file (`raya keys --save`) instead of GitHub.",
    ),
]
GithubUrlOption = Annotated[
    str,
    typer.Option(
        "--github-url", help="Base URL serving <handle>.keys (a mirror, or a test server)."
    ),
]


def project_root(root: Path | None) -> Path:
    return root or find_root(Path.cwd())


def select_project(
    root: Path | None, stack: str | None, example: bool, keys_file: Path | None
) -> tuple[Path, str, Path | None]:
    """The project folder, stack and keys file to use: the bundled example's with --example."""
    if not example:
        return project_root(root), stack or DEFAULT_STACK, keys_file
    if root is not None or stack is not None:
        raise typer.BadParameter("--example is its own project; it takes no --root or --stack")
    return EXAMPLE_ROOT, EXAMPLE_STACK, keys_file or EXAMPLE_KEYS


def resolve_users(
    config: StackConfig, keys_file: Path | None, github_url: str = GITHUB_URL
) -> tuple[UserKeys, ...]:
    """The authorized users' keys, from the keys file when one is given, else from GitHub."""
    if keys_file is not None:
        return select_users(load_keys_file(keys_file), config.authorized_users, str(keys_file))
    with err.status(f"fetching the keys of {len(config.authorized_users)} users..."):
        return fetch_keys(config.authorized_users, github_url)
