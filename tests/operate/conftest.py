"""Fixtures of the day-two tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.operate.s3 import s3_server


@pytest.fixture(scope="session")
def s3() -> Iterator[str]:
    """A real S3 implementation on 127.0.0.1 (moto's server): its `host:port`."""
    with s3_server() as address:
        yield address
