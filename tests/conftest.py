"""Fixtures shared by the program, day-two and command tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raya.model.project import EXAMPLE_ROOT
from tests.support import REPO


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A raya project in its own folder: the example stack as `prod`, its fleet, the pins."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    shutil.copy(EXAMPLE_ROOT / "Pulumi.example.yaml", root / "Pulumi.prod.yaml")
    shutil.copytree(EXAMPLE_ROOT / "deploy", root / "deploy")
    shutil.copytree(
        REPO / "image", root / "image", ignore=shutil.ignore_patterns("*.hcl", "*.sh")
    )
    return root
