"""How many agents of a pool `raya roll` may have unavailable at once (`--max-unavailable`):
parsed and resolved here, apart from the roll, so that the command's option is read at start
without loading what the roll needs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MaxUnavailable:
    """How many agents of a pool may be unavailable at once while a roll replaces them: a
    count (`5`), or a percentage of the pool's nodes (`10%`), rounded down and at least one,
    as Kubernetes resolves a Deployment's `maxUnavailable` (`ResolveFenceposts`)."""

    count: int = 0
    percent: int = 0

    ACCEPTED = (
        "accepted: a whole number of nodes from 1 (such as 5) or a percentage of each pool "
        "from 1% to 100% (such as 10%)"
    )

    @classmethod
    def parse(cls, text: str) -> MaxUnavailable:
        """`5` or `10%`; anything else raises ValueError naming what is accepted."""
        number, percent = (text[:-1], True) if text.endswith("%") else (text, False)
        if not number.isascii() or not number.isdigit() or number.startswith("0"):
            raise ValueError(f"{text!r} is not accepted; {cls.ACCEPTED}")
        value = int(number)
        if percent and value > 100:
            raise ValueError(f"{text!r} is more than the whole pool; {cls.ACCEPTED}")
        return cls(percent=value) if percent else cls(count=value)

    def of(self, pool_size: int) -> int:
        """The nodes of a pool of `pool_size` that may be unavailable at once."""
        return max(1, self.count or pool_size * self.percent // 100)

    def __str__(self) -> str:
        return f"{self.percent}%" if self.percent else str(self.count)
