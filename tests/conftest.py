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
    # ...with the cluster's Hetzner token, encrypted as `pulumi config set --secret` writes it.
    (root / "Pulumi.prod.yaml").write_text(
        (EXAMPLE_ROOT / "Pulumi.example.yaml").read_text()
        + "  raya:clusterHcloudToken:\n    secure: v1:AAAAAAAAAAAAAAAA\n"
    )
    shutil.copytree(EXAMPLE_ROOT / "deploy", root / "deploy")
    shutil.copytree(
        REPO / "image", root / "image", ignore=shutil.ignore_patterns("*.hcl", "*.sh")
    )
    return root
