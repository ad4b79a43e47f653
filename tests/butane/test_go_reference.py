"""raya's model of Go's gzip against Go itself (Debian's golang-go), byte for byte."""

from __future__ import annotations

import os
import random
import struct
import subprocess
from pathlib import Path

import pytest

from raya.butane.goflate import MAX_MODELLED, plan
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
