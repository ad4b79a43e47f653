"""The vectors on which `raya butane` still diverges from the real Butane: one list, in one place.

Each entry: case -> (the checks that diverge, its class). The vector tests mark exactly these
(test, case) pairs `xfail(strict=True)`, so a fix that makes one pass fails the run until its
entry is removed: this list can only shrink. The goal is an empty list.
"""

from __future__ import annotations

DIVERGENT: dict[str, tuple[tuple[str, ...], str]] = {}
