"""The `raya keys` command: the SSH keys the stack's authorized users log in with."""

from __future__ import annotations

from raya.commands.options import EXAMPLE, GITHUB, KEYS_FILE, ROOT, resolve_users, select_project
from raya.commands.parser import Commands, Option
from raya.defaults import DEFAULT_STACK
from raya.errors import KeysError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from pathlib import Path

commands = Commands()  # what this module adds to `raya`


@commands.command(
    Option("--stack", "-s", kind="stack", help="Stack whose raya:authorizedUsers to resolve.",
           show_default=DEFAULT_STACK),
    ROOT, EXAMPLE, KEYS_FILE,
    Option("--save", kind="path",
           help="Also write the keys to this file (`--keys-file` reads it back)."),
    GITHUB,
)  # fmt: skip
def keys(
    *, stack: str | None, root: Path | None, example: bool, keys_file: Path | None,
    save: Path | None, github_url: str,
) -> None:  # fmt: skip
    """Print each authorized user's SSH keys with their type, fingerprint and comment."""
    root, stack, keys_file = select_project(root, stack, example, keys_file)
    from raya.console import err, out
    from raya.model.config import load_stack_config, stack_file
    from raya.nodes.github_keys import dump_keys_file, key_info

    users = resolve_users(load_stack_config(stack_file(root, stack)), keys_file, github_url)
    width = max(len(user.handle) for user in users)
    for user in users:
        for key in user.keys:
            info = key_info(key)
            line = f"{user.handle:<{width}}  {info.type:<11}  {info.fingerprint}  {info.comment}"
            out.print(line.rstrip(), markup=False, soft_wrap=True)
    if save is not None:
        from raya.files import write_atomically

        try:  # whole or not at all: a failed write leaves the file as it was
            write_atomically(save, dump_keys_file(users).encode(), 0o644)
        except OSError as error:
            raise KeysError(f"{save}: cannot write the keys file: {error.strerror}") from None
        count = sum(len(user.keys) for user in users)
        err.print(
            f"wrote {count} keys of {len(users)} users to {save}", markup=False, soft_wrap=True
        )
