"""Content encoding: exact round trip, never longer than the alternatives, Go's gzip."""

from __future__ import annotations

import base64
import gzip
import json
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from raya.butane import goflate
from raya.butane.dataurl import decode_data_url, make_data_url, percent_length
from raya.butane.goflate import MAX_MODELLED, gzip_if_shorter, plan
from tests.butane.helpers import deep_huffman_data, literal_frequencies, vectors

CONTENTS = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=2000).map(lambda s: s.encode("utf-8")),
    st.lists(st.sampled_from([b"server: ", b"10.0.1.", b"\n", b"token", b"a", b"%", b" "]),
             max_size=400).map(b"".join),
    st.integers(min_value=0, max_value=70000).map(lambda n: b"x" * n),  # large, compressible
)


def _alternatives(data: bytes) -> tuple[int, int]:
    return len("data:") + percent_length(data), len("data:;base64,") + 4 * math.ceil(len(data) / 3)


@settings(max_examples=400, deadline=None)
@given(CONTENTS, st.booleans())
def test_decoding_gives_back_the_exact_bytes(data: bytes, may_compress: bool) -> None:
    url, gzipped = make_data_url(data, may_compress)
    raw = decode_data_url(url)
    assert (gzip.decompress(raw) if gzipped else raw) == data
    assert may_compress or not gzipped


@settings(max_examples=400, deadline=None)
@given(CONTENTS)
def test_chosen_encoding_is_never_longer_than_the_other_two(data: bytes) -> None:
    url, gzipped = make_data_url(data, may_compress=True)
    percent, b64 = _alternatives(data)
    cost = len(url) + (len("gzip") if gzipped else 0)
    assert cost <= percent and cost <= b64


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000))
def test_without_compression_the_shorter_plain_form_wins(data: bytes) -> None:
    url, _ = make_data_url(data, may_compress=False)
    percent, b64 = _alternatives(data)
    # Ties go to percent-encoding, as in Butane.
    assert len(url) == (b64 if b64 < percent else percent)
    assert url.startswith("data:;base64," if b64 < percent else "data:,")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000) | st.text(max_size=3000).map(str.encode))
def test_go_gzip_model_is_valid_gzip_of_the_predicted_size(data: bytes) -> None:
    modelled = plan(data)
    packed = modelled.gzip()
    assert gzip.decompress(packed) == data
    assert len(packed) == modelled.size
    assert packed[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # no mtime


@settings(max_examples=300, deadline=None)
@given(CONTENTS | st.binary(min_size=1, max_size=400), st.integers(min_value=-3, max_value=3))
def test_the_shortcuts_never_change_the_decision(data: bytes, offset: int) -> None:
    # gzip_if_shorter skips the exact plan where cheap bounds settle it (the distinct-bytes
    # floor, the fixed-code ceiling, the entropy floor): with budgets right at the exact
    # cost, it must decide as the full plan does, and hand back the same bytes.
    assume(len(data) <= MAX_MODELLED)
    modelled = plan(data)
    budget = len(";base64,") + 4 * math.ceil(modelled.size / 3) + len("gzip") + offset
    expected = modelled.gzip() if offset > 0 else None
    assert gzip_if_shorter(data, budget) == expected


GO_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"


def test_go_gzip_model_reproduces_butanes_bytes() -> None:
    # Every gzip the real Butane produced in the vectors, byte for byte. Users' own sources
    # with `compression: gzip` are passed through: only Go's header (mtime 0, best
    # compression, OS unknown) marks a gzip Butane made.
    found = 0
    for path in (vectors() / "expected").glob("*.ign"):
        for entry in json.loads(path.read_text()).get("storage", {}).get("files", []):
            contents = entry.get("contents", {})
            source = contents.get("source", "")
            if contents.get("compression") == "gzip" and source.startswith("data:;base64,"):
                go = base64.b64decode(source.split(",", 1)[1])
                if not go.startswith(GO_GZIP_HEADER):
                    continue
                assert plan(gzip.decompress(go)).gzip() == go
                found += 1
    assert found >= 3


def test_percent_encoding_keeps_rfc2396_unreserved_characters() -> None:
    url, _ = make_data_url(b"aZ09-_.!~*'() /:%\n", may_compress=False)
    assert url == "data:,aZ09-_.!~*'()%20%2F%3A%25%0A"


def test_same_input_same_bytes() -> None:
    data = b"[Unit]\nDescription=x\n" * 40
    assert make_data_url(data, True) == make_data_url(data, True)
    assert make_data_url(data, True)[1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), min_size=3, max_size=120))
def test_fast_huffman_lengths_equal_gos_package_merge(freqs: list[int]) -> None:
    # The fast path is only taken when no code exceeds Go's limit; there it must agree.
    from raya.butane.goflate import _bit_counts, _huffman_depths

    freqs = sorted(freqs)
    fast = _huffman_depths(freqs)
    if fast[0] <= 15:
        counts = _bit_counts(freqs, 15)
        go = [bits for bits in range(len(counts) - 1, 0, -1) for _ in range(counts[bits])]
        assert fast == go


def test_length_limited_codes_when_huffman_would_go_deeper_than_15(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raya.butane import goflate

    data = deep_huffman_data()
    freq = literal_frequencies(data)
    # The Huffman stage, fed directly: an unlimited tree would need 16 bits.
    assert goflate._huffman_depths(sorted(f for f in freq if f))[0] == 16
    lengths = goflate._code_lengths(freq, 15)
    assert max(lengths) == 15
    assert sum(2.0 ** -bits for bits in lengths if bits) == 1.0  # still a complete code
    # Through the whole compressor: the spy proves the length-limited construction ran.
    limits: list[int] = []
    real = goflate._bit_counts

    def spy(freqs: list[int], max_bits: int) -> list[int]:
        limits.append(max_bits)
        return real(freqs, max_bits)

    monkeypatch.setattr(goflate, "_bit_counts", spy)
    modelled = plan(data)
    packed = modelled.gzip()
    assert 15 in limits
    assert gzip.decompress(packed) == data and len(packed) == modelled.size



@pytest.mark.parametrize("bits", range(14))
def test_bit_strings_are_each_value_in_binary(bits: int) -> None:
    # Built row from row in goflate.py (start-up time). Huffman codes go out most
    # significant bit first, extra bits least significant first (RFC 1951 3.1.1).
    # Values of more than 10 bits are formatted when sent, not looked up.
    msb = [format(value, "b").zfill(bits) if bits else "" for value in range(1 << bits)]
    assert [goflate._lsb(value, bits) for value in range(1 << bits)] == [c[::-1] for c in msb]
    if bits <= 10:
        assert goflate._MSB[bits] == msb


def test_bit_strings_by_hand() -> None:
    assert goflate._MSB[3][1] == "001" and goflate._LSB[3][1] == "100"
    assert goflate._lsb(6, 13) == "0110000000000"
