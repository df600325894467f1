"""Time zones and message times: a zone name parsed in one place, and a message's moment in that zone."""

from __future__ import annotations

import logging
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; ValueError with one readable line when there is none of that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r}: expected an IANA name such as Asia/Shanghai") from None


def zone_or_utc(name: str) -> ZoneInfo:
    """`zone(name)`, or UTC with a warning for a name that is none (notes must be dated all the same)."""
    try:
        return zone(name)
    except ValueError:
        logging.getLogger("worker").warning("nanobot's timezone %r is unknown; dating notes in UTC", name)
        return ZoneInfo("UTC")


def local_time(value: Any, tz: tzinfo | None) -> datetime | None:
    """A message's moment in the configured timezone. nanobot stores naive local time of its host."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if tz is None:
        return moment
    # astimezone() reads a naive value as the host's local time, which is what nanobot wrote.
    return moment.astimezone(tz)
