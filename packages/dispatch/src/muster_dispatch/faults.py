"""Quota and outage faults: what a failed turn says about the service, and when a usage limit resets.

``quota_fault(error)`` / ``unavailable_fault(error)`` read a ``DispatchError``; ``parse_reset(text)`` finds a reset time
in the CLIs' own words ("resets Jan 1, 2030, 12am (UTC)", "try again at Jan 1st, 2030 12:00 AM", "resets 5pm
(Europe/Paris)", "regain access on 2030-01-01 at 00:00 UTC") and ``reset_from_epoch`` reads ``resetsAt`` (seconds
or milliseconds since the epoch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from muster_dispatch.errors import DispatchError


def says_any(lowered: str, words: tuple[str, ...]) -> bool:
    """Whether a lower-cased CLI text holds one of ``words`` (a harness's quota or outage words)."""
    for word in words:  # noqa: SIM110  # a loop, not any() over a generator: half the cost
        if word in lowered:
            return True
    return False


@dataclass(frozen=True, slots=True)
class QuotaFault:
    message: str
    reset_at: datetime | None


@dataclass(frozen=True, slots=True)
class UnavailableFault:
    message: str


def quota_fault(error: DispatchError | BaseException | None) -> QuotaFault | None:
    """The quota fault of a failed turn (``code == "quota"``), with its reset time when the CLI gave one."""
    if not isinstance(error, DispatchError) or error.code != "quota":
        return None
    reset = error.details.get("reset_at")
    reset_at: datetime | None = None
    if isinstance(reset, datetime):
        reset_at = reset
    elif isinstance(reset, str):
        try:
            reset_at = datetime.fromisoformat(reset)
        except ValueError:
            reset_at = None
    if reset_at is None:
        reset_at = parse_reset(error.message)
    return QuotaFault(error.message, reset_at)


def unavailable_fault(error: DispatchError | BaseException | None) -> UnavailableFault | None:
    """The outage of a failed turn: set when the CLI reported a terminal outage or connection failure."""
    if not isinstance(error, DispatchError) or not error.details.get("unavailable"):
        return None
    return UnavailableFault(error.message)


_MONTHS = {
    name: index
    for index, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for name in names
}

_RESET = re.compile(
    r"(?:resets?(?:\s+at|\s+on)?|try\s+again\s+(?:at|on|after))\s+"
    r"(?:(?P<month>[A-Za-z]{3,9})\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[AaPp]\.?[Mm]\.?)?"
    r"(?:\s*\((?P<tz>[^)]+)\)|\s+(?P<tzword>UTC|GMT))?",
)


_RESET_ISO = re.compile(
    r"(?:resets?|regain access|try again|available again|access again)\s+(?:on|at|after)?\s*"
    r"(?P<date>\d{4}-\d{2}-\d{2})(?:(?:\s+at\s+|[T ])(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::\d{2}(?:\.\d+)?)?)?"
    r"\s*(?:\((?P<tz>[^)]+)\)|(?P<tzword>UTC|GMT|Z)\b)?",
    re.IGNORECASE,
)


def parse_reset(text: str, *, now: datetime | None = None) -> datetime | None:
    """The reset time a quota message names, as an aware UTC datetime, or None when it names none.

    A date without a year is the next such date; a time without a date is the next such time (both after ``now``).
    Times are read in the zone the message names (IANA name or UTC), else UTC.
    """
    return reset_in(text, text.lower(), now)


def reset_in(text: str, lowered: str, now: datetime | None = None) -> datetime | None:
    """``parse_reset(text)`` for a caller that has ``text.lower()`` already (a quota test lowers it too): lowering a
    long message that is not ASCII costs as much as decoding its line."""
    if "reset" not in lowered and "again" not in lowered and "regain" not in lowered:  # "again": "try again" too
        return None  # the common case, without running the two patterns
    # Each pattern needs something a substring test finds faster than the pattern's own scan: the ISO one a date
    # ("2030-01-01"), the other one its case-sensitive opening word, from where the scan can start.
    iso = _RESET_ISO.search(text) if "-" in text else None
    if iso is not None:
        try:
            day = datetime.strptime(iso["date"], "%Y-%m-%d")
            when = day.replace(hour=int(iso["hour"] or 0), minute=int(iso["minute"] or 0))
            return when.replace(tzinfo=_zone(iso["tz"] or iso["tzword"])).astimezone(UTC)
        except ValueError:
            pass
    reset, tried = text.find("reset"), text.find("try")
    start = min(reset, tried) if reset >= 0 and tried >= 0 else max(reset, tried)
    if start < 0:
        return None
    for match in _RESET.finditer(text, start):
        parsed = _from_match(match, now)
        if parsed is not None:
            return parsed
    return None


def _from_match(match: re.Match[str], now: datetime | None) -> datetime | None:
    month_name, day, year, hour, minute, ampm, tz, tzword = match.group(
        "month", "day", "year", "hour", "minute", "ampm", "tz", "tzword"
    )
    clock = _clock(hour, minute, ampm)
    if clock is None:
        return None
    zone = _zone(tz or tzword)
    if month_name is None:
        local_now = (now or datetime.now(UTC)).astimezone(zone)
        when = local_now.replace(hour=clock[0], minute=clock[1], second=0, microsecond=0)
        if when <= local_now:
            when += timedelta(days=1)
        return when.astimezone(UTC)
    month = _MONTHS.get(month_name.lower())
    if month is None:
        return None
    return _on_date(int(year) if year else None, month, int(day), clock, zone, now)


def _on_date(
    year: int | None, month: int, day: int, clock: tuple[int, int], zone: tzinfo, now: datetime | None
) -> datetime | None:
    """That date at that time, in UTC; without a year, the next such date (the clock is read only then). Positional
    arguments: a keyword makes the datetime constructor parse its arguments the slow way."""
    if year is not None:
        try:
            return datetime(year, month, day, *clock, 0, 0, zone).astimezone(UTC)
        except ValueError:
            return None
    local_now = (now or datetime.now(UTC)).astimezone(zone)
    # The first year from this one where that date exists and is still ahead: February 29 may be four years away
    # (eight across a century that skips it); a date no year has (April 31) is none.
    for year_ahead in range(local_now.year, local_now.year + 9):
        try:
            when = datetime(year_ahead, month, day, *clock, 0, 0, zone)
        except ValueError:
            continue
        if when >= local_now:
            return when.astimezone(UTC)
    return None


def _clock(hour_text: str, minute_text: str | None, ampm_text: str | None) -> tuple[int, int] | None:
    """(hour, minute) on a 24-hour clock, or None for a bare number ("resets 5 times") or an impossible time."""
    hour = int(hour_text)
    minute = int(minute_text or 0)
    ampm = (ampm_text or "").replace(".", "").lower()
    if not ampm and minute_text is None:
        return None
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if hour > 23 or minute > 59:
        return None
    return hour, minute


def _zone(name: str | None) -> tzinfo:
    if not name:
        return UTC
    name = name.strip()
    if name.upper() in ("UTC", "GMT", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def reset_from_epoch(value: Any) -> datetime | None:
    """``resetsAt`` as a UTC datetime: seconds since the epoch (milliseconds when the number is that large)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    seconds = value / 1000 if value > 10**11 else value
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def earliest(resets: list[datetime | None]) -> datetime | None:
    """The earliest reset, only when every candidate gave one."""
    if not resets or any(r is None for r in resets):
        return None
    return min(r for r in resets if r is not None)
