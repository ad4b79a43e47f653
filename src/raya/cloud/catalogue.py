"""Hetzner's catalogue of server types, per location: what can be ordered where, right now.

Since 2025-09-24 a server type lists the locations it is sold in, each with its own
`deprecation` (`announced`, `unavailable_after`: after that, no new server of the type there)
and whether it is `available` (in stock) there now (Hetzner Cloud changelog, "per location
server types"; hcloud-python `hcloud/server_types/domain.py`, `ServerTypeLocation`, and
`hcloud/deprecation/domain.py`, `DeprecationInfo`). Its price there is in `prices`, by
location name. Reading it is an effect (`offers`); judging it is pure (`build_type`,
`orderable`), against a `now` the caller gives.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from raya.errors import ImageError, RayaError

if TYPE_CHECKING:
    from hcloud.server_types import BoundServerType


@dataclass(frozen=True)
class Offer:
    """One server type in one location it is listed in."""

    server_type: str
    architecture: str  # Hetzner's name: x86, arm
    location: str
    disk: int  # GB: a snapshot's minimum disk is its build server's
    hourly: Decimal | None  # net price per hour there; None if Hetzner lists none
    available: bool
    announced: datetime.datetime | None = None  # its deprecation there, if any
    unavailable_after: datetime.datetime | None = None

    def gone(self, now: datetime.datetime) -> bool:
        """Its deprecation there has passed: Hetzner creates no new server of it there."""
        return self.unavailable_after is not None and self.unavailable_after <= now

    def orderable(self, now: datetime.datetime) -> bool:
        """A server of it can be created there now: in stock and not deprecated past."""
        return self.available and not self.gone(now)


def offers_of(server_type: BoundServerType) -> tuple[Offer, ...]:
    """The offers of one server type as hcloud-python parses Hetzner's answer."""
    prices: dict[str, Decimal | None] = {}
    for price in server_type.prices or []:
        try:
            prices[str(price["location"])] = Decimal(str(price["price_hourly"]["net"]))
        except (KeyError, TypeError, InvalidOperation):
            continue  # a price Hetzner does not state is not guessed: ranked last
    found = []
    for place in server_type.locations or []:
        location = str(place.location.name)
        deprecation = place.deprecation
        found.append(
            Offer(
                server_type=str(server_type.name),
                architecture=str(server_type.architecture),
                location=location,
                disk=int(server_type.disk or 0),
                hourly=prices.get(location),
                available=bool(place.available),
                announced=deprecation.announced if deprecation else None,
                unavailable_after=deprecation.unavailable_after if deprecation else None,
            )
        )
    return tuple(found)


def offers(
    token: str,
    endpoint: str,
    names: Sequence[str] | None,
    failure: type[RayaError],
) -> tuple[Offer, ...]:
    """Hetzner's offers of the server types `names` (every type if None), raising `failure`
    when the API cannot be asked."""
    import requests
    from hcloud import HCloudException

    from raya.cloud.image import hcloud_client

    client = hcloud_client(token, endpoint)
    try:
        if names is None:
            types = list(client.server_types.get_all())
        else:
            types = [t for name in names if (t := client.server_types.get_by_name(name))]
    except (HCloudException, requests.RequestException) as error:
        raise failure(f"Hetzner API {endpoint}: {error}") from None
    return tuple(offer for server_type in types for offer in offers_of(server_type))


def build_type(
    catalogue: Iterable[Offer], locations: Sequence[str], architecture: str,
    now: datetime.datetime, chosen_by: str,
) -> tuple[str, str]:  # fmt: skip
    """The location and server type to build `architecture`'s snapshot on: in the first of
    `locations` where one is sold, available and not deprecated at all (a throwaway server
    needs no type on its way out), the one with the smallest disk (the snapshot's minimum,
    so that every type can boot it), then the cheapest there. Raises ImageError, naming the
    locations (`chosen_by` says which setting chose them) and where such types are sold."""
    fitting = [
        offer
        for offer in catalogue
        if offer.architecture == architecture
        and offer.available
        and offer.unavailable_after is None  # every deprecation states it
    ]
    for location in locations:
        here = [offer for offer in fitting if offer.location == location]
        if here:
            best = min(
                here,
                key=lambda o: (o.disk, o.hourly is None, o.hourly or 0, o.server_type),
            )
            return location, best.server_type
    sold = ", ".join(sorted({offer.location for offer in fitting})) or "no location"
    raise ImageError(
        f"{', '.join(locations)} ({chosen_by}): Hetzner sells no {architecture} server type "
        f"there that is available and not deprecated, to build the {architecture} snapshot "
        f"on; it sells such types in {sold}; nothing was built"
    )


def find(catalogue: Iterable[Offer], server_type: str, location: str) -> Offer | None:
    """The offer of `server_type` in `location`, None if it is not listed there."""
    return next(
        (o for o in catalogue if (o.server_type, o.location) == (server_type, location)), None
    )


def date(moment: datetime.datetime | None) -> str:
    """A deprecation's date as Hetzner's changelog writes it (UTC)."""
    if moment is None:
        return "an unstated date"
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
