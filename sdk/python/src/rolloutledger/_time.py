"""The envelope's ``at``: RFC 3339 as the server parses and writes it.

The server parses ``at`` with Go's time.Parse(time.RFC3339Nano, ...), whose
general parser is a little wider than RFC 3339 (a one-digit hour, a comma
before the fraction, zone offsets up to +24:00 and minutes up to 60), and
refuses what does not fall in years 0000-9999 once moved to UTC. It writes
the time back in UTC with the fraction's trailing zeros dropped. Python's
datetime has no year 0 and no nanoseconds, so both directions are done here
on integers.
"""

from __future__ import annotations

import datetime as _dt
import time as _time

__all__ = ["parse_at", "format_at", "now_at", "at_from"]

_DIGITS = "0123456789"


def _is_leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if _is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return y + (m <= 2), m, d


def _getnum(s: str, i: int, fixed: bool) -> tuple[int, int] | None:
    if i >= len(s) or s[i] not in _DIGITS:
        return None
    if i + 1 >= len(s) or s[i + 1] not in _DIGITS:
        if fixed:
            return None
        return int(s[i]), i + 1
    return int(s[i : i + 2]), i + 2


def _parse_fields(s: str):
    """Returns (year, month, day, hour, minute, second, nanos, offset seconds)
    or None. The grammar is the ledger's strict RFC 3339: two-digit fields,
    an optional '.' fraction of 1 to 9 digits, and Z or an offset +-HH:MM
    with HH <= 23 and MM <= 59."""
    n = len(s)
    if n < 4 or s[0] not in _DIGITS or any(c not in _DIGITS for c in s[1:4]):
        return None
    year, i = int(s[0:4]), 4

    def lit(i: int, c: str) -> int | None:
        return i + 1 if i < n and s[i] == c else None

    if (i := lit(i, "-")) is None:
        return None
    if (r := _getnum(s, i, True)) is None:
        return None
    month, i = r
    if not 1 <= month <= 12:
        return None
    if (i := lit(i, "-")) is None:
        return None
    if (r := _getnum(s, i, True)) is None:
        return None
    day, i = r
    if (i := lit(i, "T")) is None:
        return None
    if (r := _getnum(s, i, True)) is None:
        return None
    hour, i = r
    if hour >= 24:
        return None
    if (i := lit(i, ":")) is None:
        return None
    if (r := _getnum(s, i, True)) is None:
        return None
    minute, i = r
    if minute >= 60:
        return None
    if (i := lit(i, ":")) is None:
        return None
    if (r := _getnum(s, i, True)) is None:
        return None
    second, i = r
    if second >= 60:
        return None
    nanos = 0
    if i < n and s[i] == ".":
        j = i + 1
        while j < n and s[j] in _DIGITS:
            j += 1
        if not 1 <= j - i - 1 <= 9:
            return None
        frac = s[i + 1 : j]
        nanos = int(frac) * 10 ** (9 - len(frac))
        i = j
    if i < n and s[i] == "Z":
        offset, i = 0, i + 1
    else:
        if n - i < 6 or s[i + 3] != ":":
            return None
        sign = s[i]
        hh, mm = s[i + 1 : i + 3], s[i + 4 : i + 6]
        if any(c not in _DIGITS for c in hh + mm):
            return None
        oh, om = int(hh), int(mm)
        if oh > 23 or om > 59 or sign not in "+-":
            return None
        offset = (oh * 60 + om) * 60
        if sign == "-":
            offset = -offset
        i += 6
    if i != n:
        return None
    if day < 1 or day > _days_in(month, year):
        return None
    return year, month, day, hour, minute, second, nanos, offset


def parse_at(s: str) -> tuple[int, int] | None:
    """Parses an ``at`` value; returns (UTC seconds since the epoch,
    nanoseconds) or None when the server would refuse it."""
    f = _parse_fields(s)
    if f is None:
        return None
    year, month, day, hour, minute, second, nanos, offset = f
    secs = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset
    y, _, _ = _civil_from_days(secs // 86400)
    if not 0 <= y <= 9999:
        return None
    return secs, nanos


def format_at(secs: int, nanos: int) -> str:
    """The canonical ``at``: UTC, the fraction without trailing zeros."""
    days, rem = divmod(secs, 86400)
    y, m, d = _civil_from_days(days)
    hh, rem = divmod(rem, 3600)
    mi, ss = divmod(rem, 60)
    out = "%04d-%02d-%02dT%02d:%02d:%02d" % (y, m, d, hh, mi, ss)
    if nanos:
        out += "." + ("%09d" % nanos).rstrip("0")
    return out + "Z"


def now_at() -> str:
    """The current time as a canonical ``at``."""
    ns = _time.time_ns()
    return format_at(ns // 1_000_000_000, ns % 1_000_000_000)


def at_from(value) -> str:
    """Converts what a caller may pass as ``at`` to the string sent: None
    (now), a timezone-aware datetime, or a string (sent as given and checked
    like any other)."""
    if value is None:
        return now_at()
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("at: a datetime without a timezone is ambiguous; pass an aware one")
        u = value.astimezone(_dt.timezone.utc)
        secs = _days_from_civil(u.year, u.month, u.day) * 86400 + u.hour * 3600 + u.minute * 60 + u.second
        return format_at(secs, u.microsecond * 1000)
    return value
