"""bench/shares.py: the shares the benchmarks print are the time spent in what they name."""

from __future__ import annotations

import sys
import time

import pytest
import yaml

from bench import shares


def spin(depth: int) -> int:
    """Burns CPU for about 20 ms at the outermost call, calling itself by its global name."""
    if depth:
        return spin(depth - 1) + 1  # through the module global, so through the wrapper
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    return 0


def test_timing_counts_the_time_in_the_function_once_and_puts_it_back() -> None:
    module = sys.modules[__name__]
    original = spin
    start = time.thread_time()
    with shares.timing(module, "spin") as timed:
        assert spin(5) == 5  # five calls inside the first one
        assert spin is not original
    whole = time.thread_time() - start
    assert spin is original
    # Counted once: at least the 20 ms burnt, and not more than the whole block took (six
    # times the inner spin, were each nested call added).
    assert 0.02 <= timed.seconds <= whole


def test_compose_seconds_reads_the_texts_with_libyaml() -> None:
    assert shares.compose_seconds(["a: [1, 2]\n", "b: {c: d}\n"]) >= 0
    with pytest.raises(yaml.YAMLError, match="flow sequence"):  # it did read them
        shares.compose_seconds(["a: [1, 2]\n", "a: [1, 2\n"])
