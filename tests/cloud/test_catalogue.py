"""The build server's choice among Hetzner's offers (raya.cloud.catalogue.build_type), on
offers written here: the order of its rules, which the stand-in catalogue (whose prices rise
with the disk) cannot tell apart."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from raya.cloud.catalogue import Offer, build_type
from raya.errors import ImageError

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


def offer(name: str, disk: int, hourly: str | None, location: str = "ash") -> Offer:
    price = Decimal(hourly) if hourly is not None else None
    return Offer(name, "x86", location, disk, price, available=True)


def test_the_smallest_disk_comes_before_the_price() -> None:
    # The build server's disk becomes the snapshot's minimum: a cheaper 80 GB type would
    # make a snapshot 40 GB types cannot boot.
    offers = [offer("big", 80, "0.0050"), offer("small", 40, "0.0090")]
    assert build_type(offers, ["ash"], "x86", NOW, "test") == ("ash", "small")


def test_among_equal_disks_the_cheapest_and_an_unpriced_one_last() -> None:
    offers = [offer("unpriced", 40, None), offer("dear", 40, "0.02"), offer("cheap", 40, "0.01")]
    assert build_type(offers, ["ash"], "x86", NOW, "test") == ("ash", "cheap")
    assert build_type(offers[:2], ["ash"], "x86", NOW, "test") == ("ash", "dear")


def test_the_first_location_that_sells_one_wins() -> None:
    offers = [offer("here", 40, "0.01", "hil"), offer("there", 40, "0.001", "ash")]
    assert build_type(offers, ["sin", "hil", "ash"], "x86", NOW, "test") == ("hil", "here")
    with pytest.raises(ImageError, match=r"^sin \(test\): .* it sells such types in ash, hil;"):
        build_type(offers, ["sin"], "x86", NOW, "test")
