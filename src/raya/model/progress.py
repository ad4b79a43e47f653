"""How a long operation (`raya up`, `roll`, `restore`) says how far it is: the time since it
started, and each line's prefix, one format for all."""

from __future__ import annotations


def elapsed(seconds: float) -> str:
    """`h:mm:ss`."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def progress(done: int, left: int, seconds: float, what: str = "done") -> str:
    """`[3/8 done, 0:01:05 elapsed, 5 left]`: `done` of `done + left`, `what` naming them."""
    return f"[{done}/{done + left} {what}, {elapsed(seconds)} elapsed, {left} left]"
