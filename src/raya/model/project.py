"""Where a raya project's files are, and loading its cluster model from them."""

from __future__ import annotations

from pathlib import Path

from raya.errors import ConfigError
from raya.model.config import load_stack_config, stack_file
from raya.model.fleet import Cluster, build_cluster, fleet_file, load_fleet

EXAMPLE_ROOT = Path(__file__).parent / "example"
EXAMPLE_STACK = "example"
EXAMPLE_KEYS = EXAMPLE_ROOT / "keys.json"


def find_root(start: Path) -> Path:
    """The nearest folder at or above `start` holding `Pulumi.yaml`."""
    for folder in (start, *start.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    raise ConfigError(f"{start}: not inside a raya project (no Pulumi.yaml here or above)")


def load_cluster(root: Path, stack: str) -> Cluster:
    """The validated cluster of stack `stack` of the project at `root`."""
    config = load_stack_config(stack_file(root, stack))
    path = fleet_file(root)
    return build_cluster(config, load_fleet(path), str(path))
