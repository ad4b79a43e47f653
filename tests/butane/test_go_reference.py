"""raya's model of Go's gzip against Go itself (Debian's golang-go), byte for byte."""

from __future__ import annotations

import os
import random
import struct
import subprocess
from pathlib import Path

import pytest

from raya.butane.goflate import _CODEGEN_ORDER, MAX_MODELLED, _code_lengths, plan
from tests.butane.helpers import deep_huffman_data, literal_frequencies
from tests.support import require_tool

HERE = Path(__file__).parent / "gogzip"


@pytest.fixture(scope="module")
def go_gzip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Go program: length-prefixed inputs in, gzip.BestCompression members out."""
    go = require_tool("go")
    work = tmp_path_factory.mktemp("gogzip")
    binary = work / "gogzip"
    env = {**os.environ, "GOCACHE": str(work / "cache"), "GOPATH": str(work / "path"),
           "GOFLAGS": "-mod=mod", "GO111MODULE": "on", "HOME": str(work)}
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=HERE, env=env, check=True,
                   capture_output=True)
    return binary


def _go(binary: Path, inputs: list[bytes]) -> list[bytes]:
    payload = b"".join(struct.pack("<I", len(d)) + d for d in inputs)
    out = subprocess.run([str(binary)], input=payload, capture_output=True, check=True).stdout
    members, at = [], 0
    while at < len(out):
        (size,) = struct.unpack_from("<I", out, at)
        members.append(out[at + 4:at + 4 + size])
        at += 4 + size
    return members


def _inputs(seed: int, count: int, sizes: list[int]) -> list[bytes]:
    rng = random.Random(seed)
    alphabets = [b"ab", b"abc \n", bytes(range(256)), b"0123456789abcdef",
                 b"the quick brown fox jumps over the lazy dog\n"]
    inputs = []
    for _ in range(count):
        size, alphabet = rng.choice(sizes), rng.choice(alphabets)
        if rng.random() < 0.4:  # word-like text, where matches abound
            words = [bytes(rng.choices(alphabet, k=rng.randint(1, 8))) for _ in range(20)]
            data = b" ".join(rng.choices(words, k=size // 4 + 1))[:size]
        else:
            data = bytes(rng.choices(alphabet, k=size))
        inputs.append(data)
    return inputs


@pytest.mark.tools
@pytest.mark.parametrize(("count", "sizes"), [
    (600, [0, 1, 2, 3, 4, 5, 10, 50, 200, 1000, 5000]),
    # Several blocks (Go cuts one every 16384 tokens), matches up to 32 KiB back.
    (8, [20000, 40000, MAX_MODELLED]),
])
def test_model_is_byte_identical_to_go(go_gzip: Path, count: int, sizes: list[int]) -> None:
    inputs = _inputs(count, count, sizes)
    blocks = 0
    for data, member in zip(inputs, _go(go_gzip, inputs), strict=True):
        modelled = plan(data)
        assert modelled.gzip() == member, (len(data), modelled.kind)
        assert modelled.size == len(member)
        blocks = max(blocks, len(modelled.blocks))
    assert blocks > 1 or max(sizes) < 20000


@pytest.mark.tools
def test_real_node_files_are_byte_identical_to_go(go_gzip: Path) -> None:
    files = [p.read_bytes() for p in (Path(__file__).parents[2] / "src" / "raya").rglob("*")
             if p.is_file() and p.suffix in {".j2", ".py", ".yaml", ".json"}
             and p.stat().st_size <= MAX_MODELLED]
    assert files
    for data, member in zip(files, _go(go_gzip, files), strict=True):
        assert plan(data).gzip() == member


class _Bits:
    """Deflate's bit order: least significant bit of each byte first."""

    def __init__(self, data: bytes) -> None:
        self.value, self.at = int.from_bytes(data, "little"), 0

    def read(self, count: int) -> int:
        field = (self.value >> self.at) & ((1 << count) - 1)
        self.at += count
        return field

    def symbol(self, lengths: list[int]) -> int:
        """Decode one symbol of the canonical code with these lengths (codes are MSB first)."""
        code, size = 0, 0
        while True:
            code, size = (code << 1) | self.read(1), size + 1
            first = 0
            for bits in range(1, size):
                first = (first + lengths.count(bits)) << 1
            ranked = [s for s in range(len(lengths)) if lengths[s] == size]
            if code - first < len(ranked):
                return ranked[code - first]


def go_literal_code_lengths(member: bytes) -> list[int]:
    """The literal/length code lengths in the first (dynamic) block of a gzip member, as the
    block header sends them (RFC 1951 3.2.7)."""
    bits = _Bits(member[10:])  # Go's header: 10 bytes, no name, no extra fields
    assert bits.read(3) >> 1 == 2, "not a dynamic block"
    literals, distances, order = bits.read(5) + 257, bits.read(5) + 1, bits.read(4) + 4
    codegen = [0] * 19
    for position in _CODEGEN_ORDER[:order]:
        codegen[position] = bits.read(3)
    lengths: list[int] = []
    while len(lengths) < literals + distances:
        symbol = bits.symbol(codegen)
        if symbol < 16:
            lengths.append(symbol)
        elif symbol == 16:
            lengths += [lengths[-1]] * (3 + bits.read(2))
        else:
            lengths += [0] * (3 + bits.read(3) if symbol == 17 else 11 + bits.read(7))
    return lengths[:literals]


@pytest.mark.tools
def test_length_limited_codes_equal_gos(go_gzip: Path) -> None:
    """Where Huffman would need 16 bits, Go limits the codes to 15: the lengths raya's Huffman
    stage builds (fed directly) are the ones Go's own block header carries."""
    data = deep_huffman_data()
    (member,) = _go(go_gzip, [data])
    go = go_literal_code_lengths(member)
    assert max(go) == 15
    assert _code_lengths(literal_frequencies(data), 15) == go[:257] and not any(go[257:])
    assert plan(data).gzip() == member
