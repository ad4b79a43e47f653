"""Reading the project's JSON files (fleet, pins, keys) with errors that name the file."""

from __future__ import annotations

import json
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
