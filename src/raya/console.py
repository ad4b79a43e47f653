"""The terminal streams the commands write to: `out` for results, `err` for the rest.

Below both `raya.cli` and `raya.commands`, so that neither imports the other for them.
"""

from __future__ import annotations

from rich.console import Console

err = Console(stderr=True, highlight=False)
out = Console(highlight=False)
