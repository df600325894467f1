"""Time in one place: zone names, message times, and how a moment and a length of time are written for people.

A zone name parsed in one place, and a message's moment in that zone. A moment written as `2026-11-28 07:35:13` in the
instance's named time zone (no microseconds, no `+00:00`; the zone is named once on the page) beside how long ago it
was, `3 min 12 s ago`; a length as `4 min 55 s`, never `295.3 s`. The writing is pure: `now` is given."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
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


ABSOLUTE = "%Y-%m-%d %H:%M:%S"
# Units of a length of time, largest first; a length is written in its largest unit and the one after it.
UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


@dataclass(frozen=True)
class When:
    """A moment as the page writes it."""

    absolute: str  # in the named zone, e.g. 2026-11-28 07:35:13
    relative: str  # from now, e.g. "3 min 12 s ago", "in 2 h 5 min"
    iso: str  # for <time datetime>, in UTC


def moment(value: datetime | str | float | None) -> datetime | None:
    """A moment from what the worker and arq keep (a datetime, its ISO text, epoch seconds).

    A zoneless one is UTC (the worker writes UTC). None for anything that is no moment."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def when(value: datetime | str | float | None, tz: tzinfo, now: datetime) -> When | None:
    """`value` written in `tz` and from `now`; None when it is no moment."""
    found = moment(value)
    if found is None:
        return None
    seconds = (now - found).total_seconds()
    whole = round(seconds)  # "2 s ago", not "1.6 s ago": a moment from now needs no tenths
    if whole == 0:
        relative = "just now"
    else:
        relative = f"{duration(whole)} ago" if whole > 0 else f"in {duration(-whole)}"
    return When(
        found.astimezone(tz).strftime(ABSOLUTE), relative, found.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    )


def moment_text(value: datetime | str | float | None, tz: tzinfo, now: datetime) -> str:
    """A moment in plain text, as the page writes it (`nanobot-summary status`).

    `2026-11-28 07:35:13 (3 min 12 s ago)`; a value that is no moment as the text it is, none as `—`."""
    found = when(value, tz, now)
    if found is None:
        return "—" if value is None else str(value)
    return f"{found.absolute} ({found.relative})"


def duration(seconds: float | None) -> str:
    """`4 min 55 s`, `2 h 5 min`, `3 d 4 h`.

    Under 10 s with a tenth (`0.4 s`, a job's time), else whole; a job of a few milliseconds took `under 0.1 s`, not `0
    s`."""
    if seconds is None:
        return "—"
    seconds = abs(seconds)
    if seconds < 0.1:
        return "under 0.1 s"
    if seconds < 10:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    whole = round(seconds)
    for index, (size, unit) in enumerate(UNITS):
        if whole >= size:
            big, rest = divmod(whole, size)
            if index + 1 < len(UNITS):
                smaller, small_unit = UNITS[index + 1]
                if rest // smaller:
                    return f"{big} {unit} {rest // smaller} {small_unit}"
            return f"{big} {unit}"
    return "0 s"


def in_zone(value: datetime, tz: tzinfo | None) -> str:
    """`value` in `tz` with the zone named, for text that outlives the page (a job's outcome, a log line).

    `2026-11-28 15:35:13 Asia/Shanghai`; UTC when no zone is given."""
    tz = tz or timezone.utc
    found = moment(value) or value
    return f"{found.astimezone(tz).strftime(ABSOLUTE)} {getattr(tz, 'key', None) or found.astimezone(tz).tzname()}"
