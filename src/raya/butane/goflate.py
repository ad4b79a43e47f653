"""Go's gzip at BestCompression, reproduced: same decision, same bytes as Butane.

Butane picks gzip only when Go's compressed form is shorter than the alternatives.
zlib finds other (usually shorter) encodings than Go's compress/flate, which looks
for matches of at least 4 bytes, so deciding with zlib would pick gzip where Butane
does not. This module re-implements Go's level-9 compressor: lazy matching over
4-byte hash chains, blocks of at most 16384 tokens each written as the cheapest of a
stored, fixed-Huffman or dynamic-Huffman block, then the empty final stored block
Go's Close() writes. Inputs up to 64 KiB (Go's window buffer, filled in one go) are
modelled exactly.
"""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_right
from collections import Counter
from itertools import compress
from math import log2
from operator import mul, ne
from typing import NamedTuple

# Largest input modelled: what Go's window takes in one fill (no window shifts).
MAX_MODELLED = 2 * 32768
_BLOCK_TOKENS = 1 << 14  # Go's maxFlateBlockTokens

_MIN_MATCH, _MAX_MATCH, _CHAIN, _NICE, _LAZY = 4, 258, 4096, 258, 258
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # XFL=2 (best), OS=255

# RFC 1951 length and distance codes: first value of each code and its extra bits.
_LENGTH_BASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67,
                83, 99, 115, 131, 163, 195, 227, 258]
_LENGTH_EXTRA = [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4 + [0]
_DIST_BASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769,
              1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577]
_DIST_EXTRA = [0, 0, 0, 0] + [n for n in range(1, 14) for _ in (0, 1)]
_CODEGEN_ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]
_CODEGEN_EXTRA = {16: 2, 17: 3, 18: 7}
_FIXED_LIT = [8] * 144 + [9] * 112 + [7] * 24 + [8] * 8
_FIXED_OFF = [5] * 30
_LENGTH_CODE = [0, 0, 0] + [bisect_right(_LENGTH_BASE, n) - 1 for n in range(3, 259)]
_MATCH = 1 << 25  # a token at or above this is a match: _MATCH | length << 16 | distance


class BlockPlan(NamedTuple):
    """One deflate block as Go writes it: its kind, codes and written size in bits."""

    data: bytes  # the input bytes the block covers
    tokens: list[int]  # a byte, or _MATCH | length << 16 | distance
    kind: str  # "stored" | "fixed" | "dynamic"
    lit_lengths: list[int]
    off_lengths: list[int]
    codegen: list[tuple[int, int]]  # (code, extra value) of a dynamic header
    codegen_lengths: list[int]
    bits: int  # written bits (stored blocks: header and alignment are added in place)

    def advance(self, position: int) -> int:
        """The bit position after this block, starting at `position`."""
        if self.kind == "stored":
            return -(-(position + 3) // 8) * 8 + 32 + 8 * len(self.data)
        return position + self.bits

    def stream(self, position: int) -> str:
        """The block's bits in the order deflate sends them, starting at `position`."""
        if self.kind != "stored":
            return self._huffman()
        header = "000" + "0" * (-(position + 3) % 8)  # BFINAL=0, BTYPE=00, then align
        size = len(self.data)
        return (header + f"{size:016b}"[::-1] + f"{size ^ 0xFFFF:016b}"[::-1]
                + "".join(map(_LSB[8].__getitem__, self.data)))

    def _huffman(self) -> str:
        """The block as a string of bits in the order deflate sends them."""
        lit = _codes(self.lit_lengths)
        off = _codes(self.off_lengths)
        parts = []
        if self.kind == "fixed":
            parts.append("010")  # BFINAL=0, BTYPE=01 (sent LSB first)
        else:
            count = _codegen_count(self.codegen_lengths)
            parts += ["001", _lsb(len(self.lit_lengths) - 257, 5),
                      _lsb(len(self.off_lengths) - 1, 5), _lsb(count - 4, 4)]
            parts += [_lsb(self.codegen_lengths[s], 3) for s in _CODEGEN_ORDER[:count]]
            codes = _codes(self.codegen_lengths)
            for symbol, value in self.codegen:
                parts.append(codes[symbol])
                if symbol in _CODEGEN_EXTRA:
                    parts.append(_lsb(value, _CODEGEN_EXTRA[symbol]))

        def match(token: int) -> str:
            length, distance = token >> 16 & 0x1FF, token & 0xFFFF
            code = _LENGTH_CODE[length]
            dcode = bisect_right(_DIST_BASE, distance) - 1
            return (lit[257 + code] + _LSB[_LENGTH_EXTRA[code]][length - _LENGTH_BASE[code]]
                    + off[dcode] + _lsb(distance - _DIST_BASE[dcode], _DIST_EXTRA[dcode]))

        parts += [lit[token] if token < _MATCH else match(token) for token in self.tokens]
        parts.append(lit[256])
        return "".join(parts)


class Plan(NamedTuple):
    """What Go's gzip writer produces for one input: its blocks and total size."""

    data: bytes
    blocks: list[BlockPlan]
    size: int  # bytes of the whole gzip member

    @property
    def kind(self) -> str:
        return "empty" if not self.blocks else "+".join(b.kind for b in self.blocks)

    def gzip(self) -> bytes:
        parts, position = [], 0
        for block in self.blocks:
            parts.append(block.stream(position))
            position = block.advance(position)
        # Close()'s final empty stored block: BFINAL=1, BTYPE=00, align, LEN 0, NLEN.
        stream = "".join(parts) + "100"
        stream += "0" * (-len(stream) % 8)
        deflate = int(stream[::-1], 2).to_bytes(len(stream) // 8, "little")
        trailer = struct.pack("<II", zlib.crc32(self.data), len(self.data) & 0xFFFFFFFF)
        return _GZIP_HEADER + deflate + b"\x00\x00\xff\xff" + trailer


def _member(data: bytes, blocks: list[BlockPlan]) -> Plan:
    position = 0
    for block in blocks:
        position = block.advance(position)
    return Plan(data, blocks, 10 + -(-(position + 3) // 8) + 4 + 8)


def _lsb(value: int, bits: int) -> str:
    """`value` as `bits` bits, least significant first (how deflate sends numbers)."""
    return _LSB[bits][value] if bits < _TABLE_BITS else _BINARY[bits](value)[::-1]


def _bit_strings(widths: int, lsb_first: bool) -> list[list[str]]:
    """[bits][value]: every value of 0 to widths - 1 bits as its bit string. Each row from
    the one before (a value of n bits is one of n - 1 with a bit more): formatting each
    value alone cost a fifth of `raya butane`'s start-up."""
    rows = [[""]]
    for _ in range(1, widths):
        shorter = rows[-1]
        if lsb_first:  # the new bit is the most significant: sent last
            rows.append([s + "0" for s in shorter] + [s + "1" for s in shorter])
        else:
            rows.append(["0" + s for s in shorter] + ["1" + s for s in shorter])
    return rows


# Every value of up to 10 bits as its bit string, precomputed: _LSB[bits][value]. Extra
# bits go up to 13, but the wider values (distances over 4096) are rare and formatted
# when sent: building their 14,336 strings was most of goflate's import time.
_TABLE_BITS = 11
_LSB = _bit_strings(_TABLE_BITS, lsb_first=True)


def _codes(lengths: list[int]) -> list[str]:
    """RFC 1951 canonical Huffman codes, most significant bit first (as sent; "" for an
    unused symbol): by length, then by symbol, each code the previous one plus one,
    shifted left when the length grows."""
    codes = [""] * len(lengths)
    code, previous = 0, 0
    # sorted() is stable: equal lengths stay in symbol order.
    for symbol in sorted(compress(range(len(lengths)), lengths), key=lengths.__getitem__):
        bits = lengths[symbol]
        code <<= bits - previous
        previous = bits
        codes[symbol] = _MSB[bits][code] if bits < _TABLE_BITS else _BINARY[bits](code)
        code += 1
    return codes


# Every code of up to 10 bits as its string (longer ones are rare and formatted).
_MSB = _bit_strings(_TABLE_BITS, lsb_first=False)
_BINARY = [f"{{:0{bits}b}}".format for bits in range(16)]  # [0] is never used


def _base64_len(size: int) -> int:
    return 4 * -(-size // 3)


def gzip_if_shorter(data: bytes, budget: int) -> bytes | None:
    """Go's gzip of `data` if `;base64,<it>` plus len("gzip") is under `budget`.

    Cheap bounds on Go's block size settle most inputs without building the
    Huffman codes; only close calls pay for the exact plan.
    """
    if len(data) > MAX_MODELLED:
        raise ValueError("input too large to model")
    if data and budget <= _QUICK_FLOOR_CEILING and _cost_in_url(_quick_floor(data)) >= budget:
        return None
    tokens, boundaries = _tokens(data)
    if data and not boundaries:  # one block: bound it before building codes
        block = _Block(data, tokens)
        if _cost_in_url(_member_size(block.high(), len(data))) < budget:
            return _member(data, [block.plan()]).gzip()
        if _cost_in_url(_member_size(block.low(), len(data))) >= budget:
            return None
        found = _member(data, [block.plan()])
    else:
        found = _plan(data, tokens, boundaries)
    return found.gzip() if _cost_in_url(found.size) < budget else None


def _cost_in_url(size: int) -> int:
    """What `size` bytes of gzip cost in a data URL: `;base64,`, the base64, and "gzip"."""
    return 8 + _base64_len(size) + 4


def _quick_floor(data: bytes) -> int:
    """A lower bound on Go's gzip size, from the distinct bytes alone.

    The first occurrence of each byte value must be a literal, and d distinct
    codes take at least d*log2(d) bits (Kraft); fixed codes take 8 bits per literal.
    """
    distinct = len(set(data))
    dynamic = 29 + distinct + int(distinct * log2(distinct))
    return min(_member_size(None, len(data)), _member_size(min(8 * distinct, dynamic), 0))


def _member_size(bits: int | None, n: int) -> int:
    """gzip bytes for one block of `bits` (None: stored) plus Close()'s empty one."""
    if bits is None:
        return 10 + 5 + n + 5 + 8
    return 10 + (bits + 3 + 7) // 8 + 4 + 8


# The most _quick_floor can say (256 distinct bytes, 8 bits each): no budget above this
# can be refused by it, so it is not worth computing there.
_QUICK_FLOOR_CEILING = _cost_in_url(_member_size(8 * 256, 0))


def plan(data: bytes) -> Plan:
    """How Go's gzip.NewWriterLevel(w, BestCompression) encodes `data`."""
    if len(data) > MAX_MODELLED:
        raise ValueError("input too large to model")
    return _plan(data, *_tokens(data))


def _plan(data: bytes, tokens: list[int], boundaries: list[tuple[int, int]]) -> Plan:
    blocks, token_start, input_start = [], 0, 0
    for token_end, input_end in [*boundaries, (len(tokens), len(data))]:
        if token_end > token_start:  # Close() writes no block for no tokens
            chunk = data[input_start:input_end]
            blocks.append(_Block(chunk, tokens[token_start:token_end]).plan())
        token_start, input_start = token_end, input_end
    return _member(data, blocks)


class _Block:
    """One block's tokens and their symbol frequencies."""

    def __init__(self, data: bytes, tokens: list[int]) -> None:
        self.data = data
        self.tokens = tokens
        lit_freq = [0] * 286
        off_freq = [0] * 30
        extra = 0
        for token, times in Counter(tokens).items():
            if token < _MATCH:
                lit_freq[token] += times
                continue
            length, distance = token >> 16 & 0x1FF, token & 0xFFFF
            code = _LENGTH_CODE[length]
            lit_freq[257 + code] += times
            dcode = bisect_right(_DIST_BASE, distance) - 1
            off_freq[dcode] += times
            extra += times * (_LENGTH_EXTRA[code] + _DIST_EXTRA[dcode])
        lit_freq[256] += 1  # end of block
        self.num_lit = next(i for i in range(285, -1, -1) if lit_freq[i]) + 1
        used_offsets = [i for i, f in enumerate(off_freq) if f]
        self.real_off_freq = list(off_freq)
        if used_offsets:
            self.num_off = used_offsets[-1] + 1
        else:  # Go counts one (unwritten) offset so that the tree can be encoded
            off_freq[0], self.num_off = 1, 1
        self.lit_freq, self.off_freq, self.extra = lit_freq, off_freq, extra
        # The fixed code: 8 bits for most literals, 9 for 144-255, 7 for 256-279; 5 per offset.
        fixed_lit = 8 * sum(lit_freq) + sum(lit_freq[144:256]) - sum(lit_freq[256:280])
        self.fixed = 3 + fixed_lit + 5 * sum(off_freq) + extra
        self.stored = (len(data) + 5) * 8

    def low(self) -> int | None:
        """Block bits (None: stored) that Go's output is surely at least."""
        real_fixed = self.fixed - 5 * (self.off_freq[0] - self.real_off_freq[0])
        # No prefix code beats the entropy; a dynamic header takes at least 29 bits.
        entropy = _entropy(self.lit_freq) + _entropy(self.real_off_freq)
        low = min(real_fixed, 29 + int(entropy) + self.extra)
        return None if self.stored <= low else low

    def high(self) -> int | None:
        """Block bits (None: stored) that Go's output is surely at most."""
        return None if self.stored < self.fixed else self.fixed

    def plan(self) -> BlockPlan:
        lit_lengths = _code_lengths(self.lit_freq[:self.num_lit], 15)
        off_lengths = _code_lengths(self.off_freq[:self.num_off], 15)
        codegen, codegen_lengths, header = _dynamic_header(lit_lengths, off_lengths)
        dynamic = header + _cost(self.lit_freq, lit_lengths) + self.extra
        # The decision counts Go's unwritten offset; the output does not.
        decided = dynamic + _cost(self.off_freq, off_lengths)
        written = dynamic + _cost(self.real_off_freq, off_lengths)
        if decided < self.fixed:
            kind, decided_bits = "dynamic", decided
        else:
            kind, decided_bits = "fixed", self.fixed
            written = self.fixed - 5 * (self.off_freq[0] - self.real_off_freq[0])
            lit_lengths, off_lengths = _FIXED_LIT, _FIXED_OFF  # codes over all symbols
        if self.stored < decided_bits:
            return BlockPlan(self.data, self.tokens, "stored", [], [], [], [], self.stored)
        return BlockPlan(self.data, self.tokens, kind, lit_lengths, off_lengths, codegen,
                         codegen_lengths, written)


def _entropy(freq: list[int]) -> float:
    """Bits of an ideal code for these frequencies: sum of f * log2(total / f)."""
    used = list(filter(None, freq))
    total = sum(used)
    if not total:
        return 0.0
    spent: float = sum(map(mul, used, map(log2, used)))
    return total * log2(total) - spent


def _cost(freq: list[int], lengths: list[int]) -> int:
    return sum(map(mul, freq, lengths))


def _tokens(data: bytes) -> tuple[list[int], list[tuple[int, int]]]:
    """Go's lazy matcher: literal bytes and (_MATCH | length << 16 | distance), in order,
    and where Go cuts blocks: (tokens so far, input bytes so far) at each full block."""
    n = len(data)
    # Go inserts every position into its hash chains exactly once, in order, so the
    # chains can be built up front. They are keyed by the 4 bytes themselves (read as
    # one int): Go's hash collisions only add candidates that cannot match.
    keys = [0] * max(n - (_MIN_MATCH - 1), 0)
    for start in range(4):
        keys[start::4] = memoryview(data[start:start + (n - start) // 4 * 4]).cast("I").tolist()
    prev = [0] * n  # previous position with the same 4 bytes, +1 (0: none)
    hits: list[int] = []  # positions that have a previous occurrence, ascending
    last: dict[int, int] = {}
    setdefault = last.setdefault
    for position, key in enumerate(keys, 1):
        # Most 4-byte keys are new: one dictionary operation then, two for a repeat.
        found = setdefault(key, position)
        if found != position:
            prev[position - 1] = found
            last[key] = position
            hits.append(position - 1)
    tokens: list[int] = []
    boundaries: list[tuple[int, int]] = []
    append = tokens.append
    index, length, offset, pending = 0, _MIN_MATCH - 1, 0, False
    while index < n:
        candidate = prev[index] - 1  # the nearest earlier position with the same 4 bytes
        if candidate < index - 32768:  # none within Go's window
            candidate = -1
        if candidate < 0 and length < _MIN_MATCH:
            # Nothing to match here and nothing pending: literals up to the next
            # position that has candidates.
            after = bisect_right(hits, index)  # this position may be an out-of-window hit
            stop = hits[after] if after < len(hits) else n
            first = index - 1 if pending else index
            count = len(tokens)
            tokens.extend(data[first:stop - 1])
            # A block ends right after the literal that makes it full.
            cut = count - count % _BLOCK_TOKENS + _BLOCK_TOKENS
            while cut <= len(tokens):
                boundaries.append((cut, first + cut - count))
                cut += _BLOCK_TOKENS
            index, offset, pending = stop, 0, True
            continue
        prev_length, prev_offset = length, offset
        length, offset = _MIN_MATCH - 1, 0
        lookahead = n - index
        if candidate >= 0 and lookahead > prev_length and prev_length < _LAZY:
            length, offset = _find_match(data, prev, index, candidate, lookahead)
        if prev_length >= _MIN_MATCH and length <= prev_length:
            append(_MATCH | prev_length << 16 | prev_offset)
            index += prev_length - 1
            pending, length = False, _MIN_MATCH - 1
            if not len(tokens) % _BLOCK_TOKENS:
                boundaries.append((len(tokens), index))
        else:
            if pending:
                append(data[index - 1])
                if not len(tokens) % _BLOCK_TOKENS:
                    boundaries.append((len(tokens), index))
            index += 1
            pending = True
    if pending:
        append(data[n - 1])
    return tokens, boundaries


def _find_match(data: bytes, prev: list[int], pos: int, candidate: int,
                lookahead: int) -> tuple[int, int]:
    """Longest match along the hash chain: (length, distance), or (3, 0) for none."""
    limit = lookahead if lookahead < _MAX_MATCH else _MAX_MATCH
    nice = _NICE if limit > _NICE else limit
    best, distance = _MIN_MATCH - 1, 0
    tries = _CHAIN
    i = candidate
    window = pos - 32768
    end_byte = data[pos + best]
    while tries > 0:
        if data[i + best] == end_byte:
            # Every position on the chain starts with pos's 4 bytes (the chains are keyed
            # by them): compare from there on, 8 bytes at a time, then byte by byte; most
            # differ at once, so one byte is compared before any slice is made.
            size = _MIN_MATCH
            if size < limit and data[i + size] == data[pos + size]:
                size += 1
                while (size + 8 <= limit
                       and data[i + size:i + size + 8] == data[pos + size:pos + size + 8]):
                    size += 8
                while size < limit and data[i + size] == data[pos + size]:
                    size += 1
            if size > best and (size > _MIN_MATCH or pos - i <= 4096):
                best, distance = size, pos - i
                if size >= nice:
                    break
                end_byte = data[pos + size]
        if i == window:
            break
        i = prev[i] - 1
        if i < 0 or i < window:
            break
        tries -= 1
    return best, distance  # (3, 0) when nothing longer than 3 bytes was found


def _code_lengths(freq: list[int], max_bits: int) -> list[int]:
    """Go's huffmanEncoder.generate: the bit length of each symbol's code."""
    lengths = [0] * len(freq)
    # By frequency, then by symbol (sorted() is stable), as Go sorts them.
    used = sorted(compress(range(len(freq)), freq), key=freq.__getitem__)
    if len(used) <= 2:
        for symbol in used:
            lengths[symbol] = 1
        return lengths
    freqs = list(map(freq.__getitem__, used))
    depths = _huffman_depths(freqs)
    if depths[0] > max_bits:  # too deep: Go's length-limited construction decides
        counts = _bit_counts(freqs, max_bits)
        depths = [bits for bits in range(len(counts) - 1, 0, -1) for _ in range(counts[bits])]
    # Longest codes to the rarest symbols, as Go assigns them.
    for symbol, depth in zip(used, depths, strict=True):
        lengths[symbol] = depth
    return lengths


_INF = 2**31 - 1


def _huffman_depths(freqs: list[int]) -> list[int]:
    """Code lengths of a Huffman tree over ascending `freqs`, longest first.

    Two queues (leaves, then merged nodes in order of creation); on equal weights
    the merged node goes first. When no code exceeds the length limit this gives
    the same lengths as Go's package-merge (tests compare the two), much faster.
    """
    n = len(freqs)
    # Leaves, a sentinel, then the merged nodes as they are created: a queue that is
    # empty shows an infinite weight, so no bounds checks are needed.
    weight = [*freqs, *([_INF] * n)]
    parent = [0] * (2 * n)
    leaf, merged = 0, n + 1
    for created in range(n + 1, 2 * n):
        if weight[leaf] < weight[merged]:
            first = leaf
            leaf += 1
        else:
            first = merged
            merged += 1
        if weight[leaf] < weight[merged]:
            second = leaf
            leaf += 1
        else:
            second = merged
            merged += 1
        weight[created] = weight[first] + weight[second]
        parent[first] = parent[second] = created
    depth = [0] * (2 * n)
    for node in range(2 * n - 2, -1, -1):  # the sentinel (n) gets a depth nobody reads
        depth[node] = depth[parent[node]] + 1
    return sorted(depth[:n], reverse=True)


def _bit_counts(freqs: list[int], max_bits: int) -> list[int]:
    """How many symbols get each code length (Go's boundary package-merge)."""
    n = len(freqs)
    items = [*freqs, _INF]
    max_bits = min(max_bits, n - 1)
    # Per level: [last_freq, next_char_freq, next_pair_freq, needed]
    levels = [[0, 0, 0, 0] for _ in range(max_bits + 2)]
    leaf_counts = [[0] * (max_bits + 2) for _ in range(max_bits + 2)]
    for level in range(1, max_bits + 1):
        levels[level] = [items[1], items[2], items[0] + items[1], 0]
        leaf_counts[level][level] = 2
        if level == 1:
            levels[level][2] = _INF
    levels[max_bits][3] = 2 * n - 4
    level = max_bits
    while True:
        state = levels[level]
        if state[2] == _INF and state[1] == _INF:
            state[3] = 0
            levels[level + 1][2] = _INF
            level += 1
            continue
        prev_freq = state[0]
        if state[1] < state[2]:
            count = leaf_counts[level][level] + 1
            state[0] = state[1]
            leaf_counts[level][level] = count
            state[1] = items[count]
        else:
            state[0] = state[2]
            leaf_counts[level][:level] = leaf_counts[level - 1][:level]
            levels[level - 1][3] = 2
        state[3] -= 1
        if state[3] == 0:
            if level == max_bits:
                break
            levels[level + 1][2] = prev_freq + state[0]
            level += 1
        else:
            while levels[level - 1][3] > 0:
                level -= 1
    counts = [0] * (max_bits + 1)
    top = leaf_counts[max_bits]
    for bits, level in enumerate(range(max_bits, 0, -1), 1):
        counts[bits] = top[level] - top[level - 1]
    return counts


def _dynamic_header(
    lit_lengths: list[int], off_lengths: list[int]
) -> tuple[list[tuple[int, int]], list[int], int]:
    """A dynamic block's run-length coded code lengths, their code, and header bits."""
    codegen: list[tuple[int, int]] = []
    append = codegen.append
    freq = [0] * 19
    lengths = [*lit_lengths, *off_lengths]
    # Runs of equal lengths: where each starts, and where it ends (the next one's start).
    starts = [0, *compress(range(1, len(lengths)), map(ne, lengths[1:], lengths))]
    for start, end in zip(starts, [*starts[1:], len(lengths)], strict=True):
        size, run = lengths[start], end - start
        if size:
            append((size, 0))
            freq[size] += 1
            run -= 1
            while run >= 3:
                step = min(6, run)
                append((16, step - 3))
                freq[16] += 1
                run -= step
        else:
            while run >= 11:
                step = min(138, run)
                append((18, step - 11))
                freq[18] += 1
                run -= step
            if run >= 3:
                append((17, run - 3))
                freq[17] += 1
                run = 0
        if run:
            codegen.extend([(size, 0)] * run)
            freq[size] += run
    lengths = _code_lengths(freq, 7)
    bits = (3 + 5 + 5 + 4 + 3 * _codegen_count(lengths, freq) + _cost(freq, lengths)
            + 2 * freq[16] + 3 * freq[17] + 7 * freq[18])
    return codegen, lengths, bits


def _codegen_count(lengths: list[int], freq: list[int] | None = None) -> int:
    """How many code-length-code lengths the header lists (trailing unused ones dropped)."""
    used = freq if freq is not None else lengths
    count = 19
    while count > 4 and used[_CODEGEN_ORDER[count - 1]] == 0:
        count -= 1
    return count
