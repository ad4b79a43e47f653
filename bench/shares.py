"""CPU time spent in one function of a run, and what the parts no code can skip cost.

`Timed` wraps a function and adds up the CPU time spent in it; `timing` puts one in place of
a module global, the name its callers look it up by, so a benchmark splits one figure into
the part spent there and the rest without touching raya. With `compose_seconds` they measure
the two parts of transpiling that no Python code around them can skip: Go's gzip bytes
(raya's model of them is the only way to get them here) and reading the YAML (timed with
libyaml's C composer, the fastest reader Python has).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import yaml


class Timed:
    """`function`, adding the CPU seconds of the calling thread spent in it to `seconds`
    (a call inside a call counted once). Each thread's own time and depth: under the Pulumi
    SDK, other threads run while a callback does, and call the mocks at the same time."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function, self.seconds = function, 0.0
        self.local = threading.local()
        self.lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1
        start = time.thread_time()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.local.depth = depth
            if not depth:
                with self.lock:
                    self.seconds += time.thread_time() - start


@contextmanager
def timing(module: ModuleType, name: str) -> Iterator[Timed]:
    """While open, `module`'s global `name` is a Timed of itself."""
    original = vars(module)[name]
    vars(module)[name] = timed = Timed(original)
    try:
        yield timed
    finally:
        vars(module)[name] = original


def compose_seconds(texts: Iterable[str]) -> float:
    """CPU seconds libyaml's C composer takes to read `texts` (node trees, no Python objects)."""
    if not yaml.__with_libyaml__:
        raise SystemExit("PyYAML was built without libyaml: no C composer to time")
    start = time.process_time()
    for text in texts:
        yaml.compose(text, Loader=yaml.CSafeLoader)
    return time.process_time() - start
