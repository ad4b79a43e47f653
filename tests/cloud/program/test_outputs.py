"""`gather`: what `pulumi.Output.all` gives (values in order, secrecy, dependencies), and a
failed run's chained applies left for no later run."""

from __future__ import annotations

import pulumi
import pulumi_random as random
import pytest

from raya.cloud.program.outputs import gather
from tests.cloud.program.mocks import ProviderMocks, is_secret, reveal, run_program

PASSWORD = "random:index/randomPassword:RandomPassword"


def mocks() -> ProviderMocks:
    return ProviderMocks(zones=[], snapshots=[])


def password(name: str, length: pulumi.Input[int]) -> random.RandomPassword:
    return random.RandomPassword(name, length=length, special=False)


def test_values_in_order_secret_if_any_input_is_and_every_inputs_dependency() -> None:
    def program() -> None:
        first, second, third = (password(f"p{n}", n + 8) for n in range(3))
        gathered = gather(first.result, pulumi.Output.secret(second.result), third.result)
        # What the engine sees of the result: a resource taking it as an input.
        password("joined", gathered.apply(lambda v: sum(len(text) for text in v)))
        plain = gather(first.result, third.result)
        password("plain", plain.apply(lambda v: len(v[0]) + len(v[1])))

    found = mocks()
    result = run_program(found, program)
    joined = result.resources["joined"].inputs["length"]
    assert is_secret(joined) and reveal(joined) == 8 + 9 + 10
    assert result.resources["plain"].inputs["length"] == 8 + 10
    assert {urn.rsplit("::", 1)[-1] for urn in found.dependencies["joined"]} == {"p0", "p1", "p2"}
    assert {urn.rsplit("::", 1)[-1] for urn in found.dependencies["plain"]} == {"p0", "p2"}


def test_a_failed_run_leaves_nothing_to_fail_the_next() -> None:
    def fail(value: str) -> str:
        raise pulumi.RunError("failed on purpose")

    def failing() -> None:
        broken = pulumi.Output.from_input("x").apply(fail)
        # Its second apply is made once p0 is registered: after the run has failed.
        password("chained", gather(password("p0", 8).result, broken).apply(len))
        password("direct", broken.apply(len))  # awaited first: fails the run at once

    found = mocks()
    with pytest.raises(pulumi.RunError, match="failed on purpose"):
        run_program(found, failing)
    result = run_program(found, lambda: password("p1", 9) and None)
    assert sorted(result.resources) == ["p1"]
