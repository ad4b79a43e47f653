"""Hetzner's request budget, kept to: raya's own calls to the Hetzner Cloud API wait, when
answered 429, until the API's own figures say a request is back.

Hetzner meters its API per project: 3,600 requests an hour, refilled one a second (API
reference, "Rate Limiting"), spent by raya, the Pulumi provider, the cloud controller and the
CSI driver alike. Each answer says `RateLimit-Limit`, `RateLimit-Remaining` and
`RateLimit-Reset` (the Unix time at which the budget is full again); an empty budget answers
429 `rate_limit_exceeded`. hcloud-python (2.27, `hcloud/_client.py`, `ClientBase.request`
and `_retry_policy`) retries that error at most 5 times, 1, 2, 4, 8 and 16 s apart at most
(`exponential_backoff_function`, jittered), reading none of the headers: while the cloud
controller and the CSI driver spend from the same budget it can give up after half a minute.
Here the request is sent again after the time the headers give for one request to come back,
`(Reset - now) / (Limit - Remaining)` (a second at Hetzner's rate), until `RATE_LIMIT_PATIENCE`
seconds are spent; then the 429 goes to hcloud-python as it came.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from requests import PreparedRequest, Response
from requests.adapters import HTTPAdapter

RATE_LIMIT_PATIENCE = 600.0  # seconds raya waits in all, per request, for the budget
SHORTEST_WAIT = 0.1  # seconds


def refill_wait(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds until one request is back in the budget, by an answer's RateLimit headers;
    None when they are missing or make no sense."""
    try:
        limit = int(headers["RateLimit-Limit"])
        remaining = int(headers["RateLimit-Remaining"])
        reset = float(headers["RateLimit-Reset"])
    except (KeyError, ValueError):
        return None
    missing = limit - remaining
    if missing <= 0 or limit <= 0:
        return None
    return max(SHORTEST_WAIT, (reset - now) / missing)


class RateLimited(HTTPAdapter):
    """A requests adapter that sends a request again, after `refill_wait`, while it is
    answered 429, within `patience` seconds of `sleep` in all."""

    def __init__(
        self,
        *,
        patience: float = RATE_LIMIT_PATIENCE,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__()
        self.patience, self.now, self.sleep = patience, now, sleep
        self.waited = 0.0  # in all, for the tests and the curious

    def send(self, request: PreparedRequest, *args: Any, **kwargs: Any) -> Response:
        spent = 0.0
        while True:
            response = super().send(request, *args, **kwargs)
            if response.status_code != 429:
                return response
            wait = refill_wait(response.headers, self.now())
            if wait is None or spent + wait > self.patience:
                return response
            response.close()
            self.sleep(wait)
            spent += wait
            self.waited += wait
