"""Writing the files raya produces: whole or not at all, with their mode from the start."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` by `data`: a reader sees the old file or the new one, never a part, and
    the bytes are never readable beyond `mode` (a file holding a key is 0600 from the start).
    Raises OSError."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
