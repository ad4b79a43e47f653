"""Fixtures of the day-two tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import provider_mocks, run
from tests.operate.s3 import s3_server
from tests.operate.test_roll import Clock


@pytest.fixture(scope="session")
def s3() -> Iterator[str]:
    """A real S3 implementation on 127.0.0.1 (moto's server): its `host:port`."""
    with s3_server() as address:
        yield address


@pytest.fixture(scope="module")
def deployed() -> Run:
    """The example deployed once per module under the program mocks: outputs and resources."""
    return run(provider_mocks())


@pytest.fixture
def clock() -> Clock:
    """Time for a roll that moves only when the roll sleeps."""
    return Clock()
