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


def deep_huffman_data() -> bytes:
    """12,540 bytes whose literals need codes deeper than deflate's 15 bits, and no matches.

    17 "chain" bytes occur with Fibonacci frequencies (1, 1, 2, ... 1597): the most skewed
    counts there are, whose Huffman tree is a 16-deep ladder. Each occurrence is followed by a
    different pair of 70 "filler" bytes, so no 4 bytes repeat anywhere: LZ77 (Go's minimum match
    is 4) finds nothing, and the literal frequencies reach the Huffman stage exactly as built.
    """
    fib = [1, 1]
    while len(fib) < 17:
        fib.append(fib[-1] + fib[-2])
    # Spread the chain bytes evenly (a fixed interleaving, not random: the bytes never change).
    chain = sorted((position / count, 200 + symbol) for symbol, count in enumerate(fib)
                   for position in range(count))
    fillers = 70
    out = bytearray()
    for k, (_, symbol) in enumerate(chain):
        out += bytes([symbol, k % fillers, k // fillers])
    return bytes(out)


def literal_frequencies(data: bytes) -> list[int]:
    """What deflate's Huffman stage counts for a block of literals only: each byte, plus the
    end-of-block symbol once."""
    freq = [0] * 257
    for byte in data:
        freq[byte] += 1
    freq[256] = 1
    return freq
