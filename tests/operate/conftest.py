"""Fixtures of the day-two tests."""

from __future__ import annotations

import pytest

from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import provider_mocks, run
from tests.operate.test_roll import Clock


@pytest.fixture(scope="module")
def deployed() -> Run:
    """The example deployed once per module under the program mocks: outputs and resources."""
    return run(provider_mocks())


@pytest.fixture
def clock() -> Clock:
    """Time for a roll that moves only when the roll sleeps."""
    return Clock()
