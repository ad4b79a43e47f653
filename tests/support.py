"""Test helpers. In CI a missing real tool fails the test; elsewhere it skips it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def require_tool(name: str, path: str | None = None) -> str:
    """The path of tool `name` (or the file `path`); CI fails without it, a laptop skips."""
    found = path if path and os.access(path, os.X_OK) else shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed (scripts/install-tools installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_shared(relative: str) -> Path:
    """A path under ../shared (the spec's vectors and schemas); CI fails without it."""
    path = SHARED / relative
    if not path.exists():
        message = f"{path} is missing"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
