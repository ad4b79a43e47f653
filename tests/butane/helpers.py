"""Shared helpers for the transpiler tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from raya.butane.dataurl import decode_data_url

SCHEMAS = {"3.3.0": "v3.3.json", "3.4.0": "v3.4.json", "3.5.0": "v3.5.json"}


HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"


def vectors() -> Path:
    """The real Butane's vectors, vendored (see vectors/README.md)."""
    return HERE / "vectors"


def decoded(config: Any) -> Any:
    """The config with every data URL replaced by the bytes it carries (gunzipped)."""
    if isinstance(config, list):
        return [decoded(item) for item in config]
    if not isinstance(config, dict):
        return config
    out = {key: decoded(value) for key, value in config.items()}
    source = out.get("source")
    if isinstance(source, str) and source.startswith("data:"):
        data = decode_data_url(source)
        out["source"] = _gunzip(data) if out.get("compression") == "gzip" else data
    return out


def _gunzip(data: bytes) -> bytes:
    """The gunzipped bytes; bytes a user declared gzip but are not stay as they are (Butane
    passes `compression: gzip` through with local or inline contents, gzip or not)."""
    try:
        return gzip.decompress(data)
    except gzip.BadGzipFile:
        return data


def schema_errors(config: dict[str, Any]) -> list[str]:
    """jsonschema findings for the config against its Ignition version's schema."""
    import jsonschema

    version = config["ignition"]["version"]
    schema_path = DATA / "ignition-schemas" / SCHEMAS[version]
    schema = json.loads(schema_path.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(config)]
