"""The backup schedule: a cron spec as k3s reads `etcd-snapshot-schedule-cron`.

k3s parses it with robfig/cron's standard parser (`cron.ParseStandard`, k3s-io/k3s
`pkg/etcd/etcd.go`): five fields (minute, hour, day of month, month, day of week) of `*`,
numbers, `a-b` ranges, `/step` and comma lists, or a descriptor (`@hourly`, `@daily`, ...).
raya accepts that language minus names (`JAN`, `MON`) and `@every`, which it does not need,
and derives the longest gap between two snapshots, against which `raya status` judges the
newest snapshot's age.
"""

from __future__ import annotations

import datetime
import itertools
import re

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 6))  # fmt: skip
_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# ASCII digits only: Python's \d also matches other scripts' digits ('٣'), which k3s' cron
# parser (robfig/cron, strconv.Atoi) refuses, so a schedule raya passed would stop k3s.
_PART = re.compile(r"(?:[*?]|(\d+)(?:-(\d+))?)(?:/(\d+))?", re.ASCII)
_STARS = ("*", "?", "*/1", "?/1")
# Every schedule repeats within 400 days plus a leap day: enough to see its longest gap.
_HORIZON_DAYS = 800


class CronError(ValueError):
    """A spec k3s would refuse, or that never fires; the message says what is wrong."""


class Schedule:
    """A parsed cron spec: the minutes, hours, days, months and weekdays it fires on."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        fields = _DESCRIPTORS.get(spec, spec).split()
        if len(fields) != len(_FIELDS):
            raise CronError(
                f"{spec!r} has {len(fields)} fields; accepted: 5 (minute hour day-of-month "
                f"month day-of-week) or one of {', '.join(_DESCRIPTORS)}"
            )
        sets = [_field(text, *limits) for text, limits in zip(fields, _FIELDS, strict=True)]
        self.minutes, self.hours, self.days, self.months, self.weekdays = sets
        # robfig/cron's dayMatches: when either day field is a bare `*` (or `?`), both must
        # match; when both are restricted, either does. `*/2` is restricted (getRange drops
        # the star bit for a step above 1).
        self._day_star, self._weekday_star = (fields[i] in _STARS for i in (2, 4))

    def _fires_on(self, day: datetime.date) -> bool:
        if day.month not in self.months:
            return False
        in_days = day.day in self.days
        in_weekdays = (day.isoweekday() % 7) in self.weekdays
        if self._day_star or self._weekday_star:
            return in_days and in_weekdays
        return in_days or in_weekdays

    def longest_gap(self) -> datetime.timedelta:
        """The longest time between two consecutive snapshots, over a whole cycle."""
        start = datetime.date(2024, 1, 1)  # a leap year: 29 February is seen
        minutes = sorted(h * 60 + m for h in self.hours for m in self.minutes)
        within = max((b - a for a, b in itertools.pairwise(minutes)), default=0)
        days = [offset for offset in range(_HORIZON_DAYS)
                if self._fires_on(start + datetime.timedelta(days=offset))]  # fmt: skip
        if len(days) < 2 and len(minutes) * len(days) < 2:
            raise CronError(f"{self.spec!r} fires at most once in two years")
        # From a day's last snapshot to the next firing day's first.
        across = max(
            (b - a) * 1440 + minutes[0] - minutes[-1] for a, b in itertools.pairwise(days)
        )
        return datetime.timedelta(minutes=max(within, across))


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        match = _PART.fullmatch(part)
        if not match:
            raise CronError(
                f"{name} field {text!r}: {part!r} is not *, N, N-M or one of them with a /step"
            )
        first, last, step = match.groups()
        start = low if first is None else int(first)
        end = (high if first is None or step else start) if last is None else int(last)
        if not (low <= start <= end <= high):
            raise CronError(f"{name} field {text!r}: accepted values are {low}-{high}")
        if step is not None and int(step) == 0:
            raise CronError(f"{name} field {text!r}: a step of 0")
        values.update(range(start, end + 1, int(step or 1)))
    return frozenset(values)
