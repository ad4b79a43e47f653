"""Hetzner's request budget: the stand-in (tests/cloud/hetzner_api.py) meters requests as the API
reference's "Rate Limiting" says, and raya's own client (raya.cloud.ratelimit, mounted by
`hcloud_client`) waits on a 429 for the time the RateLimit headers give, where hcloud-python
alone would retry five times without reading them."""

from __future__ import annotations

import functools

import pytest
import requests
from hcloud import APIException

from raya.cloud import ratelimit
from raya.cloud.image import hcloud_client
from tests.cloud import hetzner_api as standin
from tests.conftest import HetznerApi


class Clock:
    """Unix time that moves only when slept."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """One clock for the stand-in's budget and raya's waits."""
    found = Clock()
    monkeypatch.setattr(
        ratelimit,
        "RateLimited",
        functools.partial(ratelimit.RateLimited, now=found.now, sleep=found.sleep),
    )
    return found


def test_the_standin_spends_one_a_request_and_answers_429_when_empty(
    hetzner_api: HetznerApi, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = standin.Budget(limit=3, clock=clock.now)
    monkeypatch.setattr(standin, "BUDGET", budget)
    auth = {"Authorization": f"Bearer {standin.TOKEN}"}
    answers = [requests.get(f"{hetzner_api.url}/server_types", headers=auth, timeout=10)
               for _ in range(4)]  # fmt: skip
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
    assert {a.headers["RateLimit-Limit"] for a in answers} == {"3"}
    # Full again 3 s on (one a second), as nothing refilled meanwhile.
    assert answers[3].headers["RateLimit-Reset"] == str(int(clock.t) + 3)
    assert answers[3].json()["error"]["code"] == "rate_limit_exceeded"
    assert (len(budget.requests), budget.refused) == (3, 1)
    clock.sleep(2)  # two refilled
    again = requests.get(f"{hetzner_api.url}/server_types", headers=auth, timeout=10)
    assert (again.status_code, again.headers["RateLimit-Remaining"]) == (200, "1")


def test_raya_waits_for_a_request_to_come_back_and_gets_through(
    hetzner_api: HetznerApi, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = standin.Budget(limit=2, clock=clock.now)
    monkeypatch.setattr(standin, "BUDGET", budget)
    client = hcloud_client(standin.TOKEN, hetzner_api.url)
    for _ in range(5):
        assert client.server_types.get_all()  # one request each
    # The third, fourth and fifth each found the budget empty, waited the second the headers
    # gave for one to come back (Reset 2 s on, 2 missing), and got through.
    assert budget.refused == 3
    assert clock.slept == [1.0, 1.0, 1.0]
    assert budget.requests == ["GET /v1/server_types"] * 5


def test_past_its_patience_the_429_reaches_the_caller(
    hetzner_api: HetznerApi, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = standin.Budget(limit=1, refill=3600.0, clock=clock.now)  # one an hour
    monkeypatch.setattr(standin, "BUDGET", budget)
    client = hcloud_client(standin.TOKEN, hetzner_api.url)
    client._client._retry_max_retries = 0  # hcloud-python's own retries, real sleeps: off
    client.server_types.get_all()
    with pytest.raises(APIException) as caught:
        client.server_types.get_all()
    assert caught.value.code == "rate_limit_exceeded"
    assert clock.slept == []  # an hour to wait is more than 600 s: not waited at all
