"""Options and project selection shared by the commands that read a stack.

Light to import (start-up time, issue 26): the model and the key fetching are imported by
the functions that use them, once the command's work has started.
"""

from __future__ import annotations

from raya.commands.parser import BadParameter, Option
from raya.defaults import DEFAULT_STACK, GITHUB_URL, HCLOUD_API_URL
from raya.errors import ConfigError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from pathlib import Path

    from raya.model.config import StackConfig
    from raya.nodes.github_keys import UserKeys


# How a command names nodes: the fleet's names (raya.model.fleet), pools' included.
NODE_NAMES = "control-plane, control-plane-<k>, agent-<i> or <pool>-<i>"
ROOT = Option(
    "--root", kind="path", help="Project folder, holding Pulumi.yaml.",
    show_default="the nearest one at or above the current folder",
)  # fmt: skip
STACK = Option(
    "--stack", "-s", kind="stack", help="The stack (Pulumi.<stack>.yaml).", default=DEFAULT_STACK
)
EXAMPLE = Option(
    "--example", kind="flag",
    help="Use the bundled example project (control plane + 3 agents; `raya keys` reads its "
    "example keys file): no account, no network.",
)  # fmt: skip
KEYS_FILE = Option(
    "--keys-file", kind="path",
    help="Read the SSH keys from this file (`raya keys --save`) instead of GitHub.",
)  # fmt: skip
GITHUB = Option(
    "--github-url", kind="url", help="Base URL serving <handle>.keys (a mirror, or a test server).",
    default=GITHUB_URL,
)  # fmt: skip
HCLOUD_ENDPOINT = Option(
    "--hcloud-endpoint", kind="url", envvar="HCLOUD_ENDPOINT", help="Hetzner Cloud API endpoint.",
    default=HCLOUD_API_URL,
)  # fmt: skip


def project_root(root: Path | None) -> Path:
    """The project folder: `root` when given (it must be a folder), else the nearest one
    holding Pulumi.yaml. The first step of every command that reads a project."""
    if root is not None:
        if not root.is_dir():
            raise ConfigError(f"{root}: no such folder (--root)")
        return root
    from pathlib import Path

    from raya.model.project import find_root

    return find_root(Path.cwd())


def select_project(
    root: Path | None, stack: str | None, example: bool, keys_file: Path | None
) -> tuple[Path, str, Path | None]:
    """The project folder, stack and keys file to use: the bundled example's with --example."""
    if not example:
        return project_root(root), stack or DEFAULT_STACK, keys_file
    if root is not None or stack is not None:
        raise BadParameter("--example is its own project; it takes no --root or --stack")
    from raya.model.project import EXAMPLE_KEYS, EXAMPLE_ROOT, EXAMPLE_STACK

    return EXAMPLE_ROOT, EXAMPLE_STACK, keys_file or EXAMPLE_KEYS


def resolve_users(
    config: StackConfig, keys_file: Path | None, github_url: str
) -> tuple[UserKeys, ...]:
    """The authorized users' keys, from the keys file when one is given, else from GitHub."""
    from raya.nodes.github_keys import fetch_keys, load_keys_file, select_users

    if keys_file is not None:
        return select_users(load_keys_file(keys_file), config.authorized_users, str(keys_file))
    from raya.console import err

    with err.status(f"fetching the keys of {len(config.authorized_users)} users..."):
        return fetch_keys(config.authorized_users, github_url)
