"""Reading the project's JSON files (fleet, pins, keys) and checking their keys, with errors that
name the file."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from raya.errors import RayaError


def read_json(path: Path, what: str, error: type[RayaError], hint: str = "") -> Any:
    """The parsed contents of `path`, a `what` file; missing or malformed, an `error`."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: {what} file not found{hint}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as problem:
        raise error(f"{path}: not JSON: {problem}") from None


def check_keys(
    mapping: Mapping[str, object],
    accepted: Sequence[str],
    required: Sequence[str],
    fail: Callable[[str, str], RayaError],
    noun: str,
) -> None:
    """Refuse, through `fail(key, problem)`, the first unknown key of `mapping`, then the first
    `required` one it lacks; `accepted` is listed in the order given, and each key is `noun`."""
    unknown = sorted(set(mapping) - set(accepted))
    if unknown:
        raise fail(unknown[0], f"is not {noun}; accepted: {', '.join(accepted)}")
    missing = [key for key in required if key not in mapping]
    if missing:
        raise fail(missing[0], "is required")
