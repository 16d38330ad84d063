"""metav1.MicroTime as kube-apiserver reads it: Go's time.Parse with the layout
"2006-01-02T15:04:05.000000Z07:00" (exactly six fractional digits; "Z" or a +hh:mm offset),
returned in UTC. Errors carry Go's words ('parsing time "2026-11-24T00:00:00Z" as
"2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"'), which the server puts
behind "Lease in version "v1" cannot be handled as a Lease: ".
Does not: parse metav1.Time (seconds), which the server leaves as written here.
Tests: tests/integration/kubeapi/test_object_lifecycle.py (leases with and without
microseconds, on both backends)"""

from __future__ import annotations

import calendar
import datetime
import functools

LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
# (literal prefix, element) in layout order; "" ends it
_CHUNKS = (("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05"),
           ("", ".000000"), ("", "Z07:00"))


class ParseError(ValueError):
    """Go's *time.ParseError text."""


@functools.lru_cache(maxsize=1024)
def parse(value: str) -> str:
    """`value` as the server returns it (UTC, six digits), or ParseError."""
    fields: dict[str, int] = {}
    rest, offset = value, 0
    for prefix, element in _CHUNKS:
        if prefix:
            if not rest.startswith(prefix):
                raise _error(value, prefix, rest)
            rest = rest[len(prefix):]
        hold = rest
        got, rest, out_of_range = _element(element, rest)
        if out_of_range:
            raise ParseError(f"parsing time {_quote(value)}: {out_of_range} out of range")
        if got is None:
            raise _error(value, element, hold)
        if element == "Z07:00":
            offset = got
        else:
            fields[element] = got
    if rest:
        raise ParseError(f"parsing time {_quote(value)}: extra text: {_quote(rest)}")
    year, month, day = fields["2006"], fields["01"], fields["02"]
    if day < 1 or day > _days_in(month, year):
        raise ParseError(f"parsing time {_quote(value)}: day out of range")
    shift = 400 if year < 400 else -400 if year > 9000 else 0  # the calendar repeats
    when = datetime.datetime(year + shift, month, day, fields["15"], fields["04"],
                             fields["05"], fields[".000000"] // 1000) - datetime.timedelta(
                                 seconds=offset)
    year = when.year - shift
    return (f"{'-' if year < 0 else ''}{abs(year):04d}"
            f"{when.strftime('-%m-%dT%H:%M:%S.%fZ')}")


def _element(element: str, value: str) -> tuple[int | None, str, str]:
    """(number or None for a mismatch, what is left, range error word or "")."""
    if element == "2006":
        if len(value) < 4 or not value[0].isdigit():
            return None, value, ""
        year = _atoi(value[:4])
        return (None, value, "") if year is None else (year, value[4:], "")
    if element in ("01", "02", "04", "05"):
        got, rest = _getnum(value, fixed=True)
        if got is None:
            return None, value, ""
        limit = {"01": (1, 12, "month"), "02": (0, 31, "day"), "04": (0, 59, "minute"),
                 "05": (0, 59, "second")}[element]
        word = "" if limit[0] <= got <= limit[1] else limit[2]
        if element == "02":
            word = ""  # the day is checked against its month afterwards
        return got, rest, word
    if element == "15":
        got, rest = _getnum(value, fixed=False)
        if got is None:
            return None, value, ""
        return got, rest, "" if got < 24 else "hour"
    if element == ".000000":
        if len(value) < 7 or value[0] not in ".,":
            return None, value, ""
        ns = _atoi(value[1:7])
        if ns is None:
            return None, value, ""
        if ns < 0:
            return ns, value[7:], "fractional second"
        return ns * 1000, value[7:], ""
    # "Z07:00"
    if value[:1] == "Z":
        return 0, value[1:], ""
    if len(value) < 6 or value[3] != ":" or value[0] not in "+-":
        return None, value, ""
    hours, _ = _getnum(value[1:3], fixed=True)
    minutes, _ = _getnum(value[4:6], fixed=True)
    if hours is None or minutes is None:
        return None, value, ""
    if hours > 24:
        return 0, value[6:], "time zone offset hour"
    if minutes > 60:
        return 0, value[6:], "time zone offset minute"
    seconds = (hours * 60 + minutes) * 60
    return (seconds if value[0] == "+" else -seconds), value[6:], ""


def _getnum(value: str, *, fixed: bool) -> tuple[int | None, str]:
    if not value[:1].isdigit() or not value[:1].isascii():
        return None, value
    if not value[1:2].isdigit() or not value[1:2].isascii():
        return (None, value) if fixed else (int(value[0]), value[1:])
    return int(value[:2]), value[2:]


def _atoi(text: str) -> int | None:
    """Go's time.atoi: an optional sign, then decimal digits only."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    return -int(body) if text[0] == "-" else int(body)


def _days_in(month: int, year: int) -> int:
    return calendar.monthrange(year + 400 if year < 400 else year, month)[1]


def _error(value: str, element: str, rest: str) -> ParseError:
    return ParseError(f"parsing time {_quote(value)} as {_quote(LAYOUT)}: cannot parse "
                      f"{_quote(rest)} as {_quote(element)}")


def _quote(s: str) -> str:
    """time.quote: ASCII as is (with \\ and " escaped), other bytes as \\xNN."""
    out = ['"']
    for ch in s:
        if ch >= "\x80" or ch < " ":
            out.extend(f"\\x{b:02x}" for b in ch.encode())
        else:
            out.append("\\" + ch if ch in '"\\' else ch)
    out.append('"')
    return "".join(out)
