"""bench/fleet.py: the model adds up what it names, from its parameters."""

from __future__ import annotations

from dataclasses import replace

from bench import fleet
from raya.model.unavailable import MaxUnavailable

P = fleet.Parameters()


def test_an_action_is_looked_at_half_a_second_on_then_doubling() -> None:
    # Looks at 0.5, 1.5, 3.5, 7.5, 15.5 and 31.5 s: the sixth sees a 20 s create done.
    assert fleet.polls(P, 20.0) == 6
    assert fleet.polls(P, 0.5) == 1
    assert fleet.provider_requests(P) == (6 + 3, 4 + 2)  # the 5 s delete: 0.5 ... 7.5 s


def test_the_batched_roll_runs_ten_batches_of_twenty() -> None:
    roomy = replace(P, reserved_per_hour=0)
    ten = fleet.roll_batched(roomy, MaxUnavailable(count=20))
    twenty = fleet.roll_batched(roomy, MaxUnavailable(count=10))
    assert ten.waited == twenty.waited == 0
    # Twice the batches, each engine run over 20 resources fewer (10 servers and records,
    # 0.05 s each): 20 batches take twice 10 of them, less 20 x 1 s.
    assert abs(twenty.seconds - (2 * ten.seconds - 20 * 1.0)) < 1e-6


def test_a_budget_too_small_makes_the_run_wait() -> None:
    tight = replace(P, reserved_per_hour=P.budget_per_hour - 600)  # 600 an hour left
    projection = fleet.up(tight)
    # 2 + 203 x 9 requests; the run itself 25 + 0.05 x 436 + 20 + 90 = 156.8 s, in which the
    # budget gives 600 + 156.8 / 6; the rest wait 6 s each.
    assert projection.requests == 1829
    assert abs(projection.waited - (1829 - (600 + 156.8 / 6)) * 6) < 1e-6
