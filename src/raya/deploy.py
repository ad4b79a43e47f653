"""`raya preview | up | destroy`: the Pulumi program driven through the Automation API.

A local workspace on the project folder runs `src/raya/program/` exactly as `pulumi up` in
the repository would, with the project's backend (local by default, `PULUMI_BACKEND_URL` for
a shared one). Progress streams through `on_output`, which only ever receives the CLI's own
display, where secrets show as `[secret]`.
"""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pulumi import automation as auto

from raya.errors import DeployError
from raya.pins import load_chart_pins, load_pins
from raya.project import load_cluster

Action = Literal["preview", "up", "destroy"]
OnOutput = Callable[[str], None]
INSTALL_TIMEOUT = 60.0  # seconds without an answer from get.pulumi.com
INSTALL_HINT = (
    "install it with `curl -fsSL https://get.pulumi.com | sh` "
    "(see https://www.pulumi.com/docs/install/) and retry"
)


@dataclass(frozen=True)
class Result:
    changes: dict[str, int]  # operation ("create", "same", ...) -> resources
    outputs: dict[str, str]  # stack outputs as printable text, secrets as "[secret]"


def pulumi_command() -> auto.PulumiCommand:
    """The Pulumi CLI on PATH; else the one matching this SDK under ~/.pulumi/versions,
    downloaded there first if it is not (which needs https://get.pulumi.com)."""
    previous = socket.getdefaulttimeout()
    # The SDK's download sets no timeout: without one, a filtered network hangs forever.
    socket.setdefaulttimeout(INSTALL_TIMEOUT)
    try:
        if shutil.which("pulumi"):
            return auto.PulumiCommand()
        return auto.PulumiCommand.install()
    except Exception as error:  # download, install script, version check: all mean the same
        raise DeployError(
            f"the Pulumi CLI is missing or unusable and could not be installed ({error}); "
            + INSTALL_HINT
        ) from None
    finally:
        socket.setdefaulttimeout(previous)


def open_stack(root: Path, name: str, create: bool) -> auto.Stack:
    """Stack `name` of the project at `root`, created in the backend if `create`."""
    opts = auto.LocalWorkspaceOptions(work_dir=str(root), pulumi_command=pulumi_command())
    try:
        if create:
            return auto.create_or_select_stack(name, work_dir=str(root), opts=opts)
        return auto.select_stack(name, work_dir=str(root), opts=opts)
    except auto.StackNotFoundError:
        raise DeployError(
            f"stack {name} does not exist in the Pulumi backend (nothing deployed yet?)"
        ) from None
    except auto.CommandError as error:
        raise DeployError(f"could not open stack {name}: {_last_line(error)}") from None


def run(
    action: Action,
    root: Path,
    stack_name: str,
    on_output: OnOutput,
) -> Result:
    """Run `action` on the stack. Before a preview or an update, the stack file, fleet and
    pins are validated, so bad input fails here, in one line, before Pulumi starts; a destroy
    does not run the program, and must work whatever state those files are in."""
    if action != "destroy":
        load_cluster(root, stack_name)
        load_pins(root)
        load_chart_pins(root)
    # Destroying a stack that was never deployed is a mistake, not a reason to create one.
    stack = open_stack(root, stack_name, action != "destroy")
    # The CLI's own display, where secrets read `[secret]`; plain text, raya prints it.
    options: dict[str, Any] = {"on_output": on_output, "on_error": on_output, "color": "never"}
    try:
        if action == "preview":
            preview = stack.preview(**options)
            return Result(changes=_counts(preview.change_summary), outputs={})
        if action == "up":
            up = stack.up(**options)
            return Result(
                changes=_counts(up.summary.resource_changes), outputs=_printable(up.outputs)
            )
        destroy = stack.destroy(**options)
        return Result(changes=_counts(destroy.summary.resource_changes), outputs={})
    except auto.CommandError as error:
        raise DeployError(
            f"pulumi {action} of stack {stack_name} failed: {_last_line(error)}"
        ) from None


def _counts(changes: Mapping[Any, int] | None) -> dict[str, int]:
    """Resources per operation; the operation is an enum in previews, text in updates."""
    counts = {str(getattr(op, "value", op)): int(n) for op, n in (changes or {}).items()}
    return dict(sorted(counts.items()))


def _printable(outputs: Mapping[str, auto.OutputValue]) -> dict[str, str]:
    return {
        name: "[secret]" if output.secret else json.dumps(output.value, sort_keys=True)
        for name, output in sorted(outputs.items())
    }


def _last_line(error: auto.CommandError) -> str:
    """The CLI's last error line: its message, never a value (the CLI masks secrets)."""
    lines = [
        line[line.index("error:") :].strip() for line in str(error).splitlines() if "error:" in line
    ]
    return lines[-1] if lines else "see the output above"
