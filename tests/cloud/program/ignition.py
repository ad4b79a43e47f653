"""Reading files back out of an Ignition config, whatever encoding the renderer chose."""

from __future__ import annotations

import base64
import gzip
import json
import urllib.parse
from typing import Any


def ignition_files(ignition: str) -> dict[str, bytes]:
    """Every file of an Ignition config (inline data URLs), by path."""
    config: dict[str, Any] = json.loads(ignition)
    return {
        entry["path"]: _contents(entry["contents"])
        for entry in config.get("storage", {}).get("files", [])
        if "contents" in entry
    }


def _contents(contents: dict[str, Any]) -> bytes:
    header, _, data = contents["source"].partition(",")
    assert header.startswith("data:"), f"not inline: {header}"
    raw = (
        base64.b64decode(data)
        if header.endswith(";base64")
        else urllib.parse.unquote_to_bytes(data)
    )
    return gzip.decompress(raw) if contents.get("compression") == "gzip" else raw
