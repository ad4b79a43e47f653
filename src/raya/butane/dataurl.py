"""Data URLs exactly as Butane picks them: the shortest of three encodings."""

from __future__ import annotations

import base64
import functools
import math
import struct
import zlib

from raya.butane.goflate import MAX_MODELLED, gzip_if_shorter

# RFC 2396 unreserved characters: the ones Butane's percent-encoding leaves alone.
_SAFE = b"-_.!~*'()"
_UNRESERVED = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + _SAFE
_PERCENT = [chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in range(256)]
# Go's gzip header at BestCompression: no name, no mtime, XFL=2, OS=255 (unknown).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
# The smallest gzip member is 20 bytes (header, empty deflate block, trailer), so
# ";base64," plus its base64 plus len("gzip") is never under this.
_GZIP_FLOOR = len(";base64,") + 4 * math.ceil(20 / 3) + len("gzip")


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (no timestamp), maximum compression."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS, 9)
    body = deflate.compress(data) + deflate.flush()
    return _GZIP_HEADER + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def percent_length(data: bytes) -> int:
    """Length of the `data:,` opaque part without building it."""
    return 1 + len(data) + 2 * len(data.translate(None, _UNRESERVED))


def make_data_url(data: bytes, may_compress: bool) -> tuple[str, bool]:
    """(url, gzipped). Ties go to the earlier candidate: percent, base64, gzip.

    `may_compress` is false when the user already set a compression: their bytes
    are then encoded as they are.
    """
    percent_len = percent_length(data)
    base64_len = len(";base64,") + 4 * math.ceil(len(data) / 3)
    use_base64 = base64_len < percent_len
    best = base64_len if use_base64 else percent_len
    if may_compress and best > _GZIP_FLOOR:
        packed = _gzip_if_shorter(data, best)
        if packed is not None:
            return "data:;base64," + base64.b64encode(packed).decode("ascii"), True
    if use_base64:
        return "data:;base64," + base64.b64encode(data).decode("ascii"), False
    return "data:," + "".join(map(_PERCENT.__getitem__, data)), False


# Pure, and the costliest step of a render (the Go model is Python): the files every node
# carries (scripts, units) are compressed once per process, not once per node.
@functools.lru_cache(maxsize=512)
def _gzip_if_shorter(data: bytes, budget: int) -> bytes | None:
    """Gzip bytes whose `;base64,` form plus len("gzip") is under budget, else None.

    Up to MAX_MODELLED bytes this is Go's exact output (so the choice is Butane's);
    beyond, where the choice is rarely close, zlib stands in for Go.
    """
    if len(data) <= MAX_MODELLED:
        return gzip_if_shorter(data, budget)
    packed = gzip_bytes(data)
    return packed if len(";base64,") + 4 * math.ceil(len(packed) / 3) + 4 < budget else None


def decode_data_url(url: str) -> bytes:
    """The bytes a `data:` URL carries (undoing base64 or percent-encoding only)."""
    if not url.startswith("data:"):
        raise ValueError(f"not a data URL: {url[:20]!r}")
    header, sep, payload = url[5:].partition(",")
    if not sep:
        raise ValueError("data URL without a comma")
    if header.endswith(";base64"):
        return base64.b64decode(payload, validate=True)
    from urllib.parse import unquote_to_bytes  # rarely needed: urllib.parse costs start-up

    return unquote_to_bytes(payload)
