"""A campaign's rules: calling windows, retries by outcome, a contact's timezone.

Pure functions over explicit times (no clock, no I/O), so the same code decides in the
claiming activity and in tests, and a daylight-saving change is a plain input. Windows are
in the contact's local time: a window that opens at 09:00 opens at 09:00 on the wall clock
of the person called, whatever their offset is that day.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import phonenumbers
from phonenumbers import timezone as pn_timezone
from pydantic import BaseModel, ConfigDict, Field

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
RETRY_OUTCOMES = ("no_answer", "busy", "voicemail", "dial_failed", "agent_lost")
_RANGE = re.compile(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class RuleError(ValueError):
    """A window, retry rule, number or timezone that cannot be used; the message names it."""


class WindowRange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    days: list[int]  # 0 = Monday
    start_min: int = Field(ge=0, le=24 * 60)
    end_min: int = Field(ge=0, le=24 * 60)


class Windows(BaseModel):
    """When a contact may be called; ``always`` (simulations) ignores ranges and skip dates."""

    model_config = ConfigDict(extra="forbid")

    always: bool = False
    ranges: list[WindowRange] = []
    skip_dates: list[date] = []


class RetryRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=0, le=100)  # retries after the first attempt with this outcome
    delay_s: float = Field(ge=0, le=30 * 86400)


def _days(spec: str) -> list[int]:
    spec = spec.lower()
    if spec in ("daily", "*", "every"):
        return list(range(7))
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        if a[:3] not in DAYS or (b and b[:3] not in DAYS):
            raise RuleError(f"window days '{spec}': use Mon..Sun, e.g. Mon-Fri or Sat,Sun")
        i, j = DAYS.index(a[:3]), DAYS.index((b or a)[:3])
        out += [d % 7 for d in range(i, (j if j >= i else j + 7) + 1)]
    return sorted(set(out))


def parse_windows(specs: list[str], skip_dates: list[str] | None = None) -> Windows:
    """``["Mon-Fri 09:00-12:00,13:00-20:00", "Sat 10:00-14:00"]`` (one spec may also hold
    several separated by ``;``); ``["always"]`` calls at any hour."""
    skips: list[date] = []
    for s in skip_dates or []:
        try:
            skips.append(date.fromisoformat(s.strip()))
        except ValueError:
            raise RuleError(f"skip date '{s}': use YYYY-MM-DD") from None
    parts = [p.strip() for spec in specs for p in spec.split(";") if p.strip()]
    if not parts:
        raise RuleError("no calling window: give one, e.g. 'Mon-Fri 09:00-20:00'")
    if [p.lower() for p in parts] == ["always"]:
        return Windows(always=True, skip_dates=skips)
    ranges: list[WindowRange] = []
    for part in parts:
        days_spec, _, times = part.partition(" ")
        if not times.strip():
            raise RuleError(f"window '{part}': expected DAYS HH:MM-HH:MM, e.g. 'Mon-Fri 09:00-20:00'")
        days = _days(days_spec)
        for r in times.replace(" ", "").split(","):
            m = _RANGE.match(r)
            if not m:
                raise RuleError(f"window '{part}': time range '{r}' is not HH:MM-HH:MM")
            h1, m1, h2, m2 = (int(x) for x in m.groups())
            start, end = h1 * 60 + m1, h2 * 60 + m2
            if m1 > 59 or m2 > 59 or end > 24 * 60 or start >= end:
                raise RuleError(f"window '{part}': range '{r}' must start before it ends, within a day")
            ranges.append(WindowRange(days=days, start_min=start, end_min=end))
    return Windows(ranges=ranges, skip_dates=skips)


def parse_duration(text: str) -> float:
    m = _DURATION.match(text.strip().lower())
    if not m:
        raise RuleError(f"duration '{text}': use a number and s, m, h or d, e.g. 30m or 2h")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_retry(spec: str) -> tuple[str, RetryRule]:
    """``no_answer=3/2h``: up to 3 more attempts after a no_answer, each 2 hours later."""
    outcome, eq, rest = spec.partition("=")
    outcome = outcome.strip()
    if not eq or outcome not in RETRY_OUTCOMES:
        raise RuleError(
            f"retry '{spec}': expected OUTCOME=COUNT/DELAY with OUTCOME one of " + ", ".join(RETRY_OUTCOMES)
        )
    count, slash, delay = rest.partition("/")
    if not slash or not count.strip().isdigit():
        raise RuleError(f"retry '{spec}': expected COUNT/DELAY, e.g. 3/2h")
    return outcome, RetryRule(count=int(count), delay_s=parse_duration(delay))


def _local(day: date, minute: int, tz: ZoneInfo) -> datetime:
    if minute >= 24 * 60:
        return datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
    return datetime.combine(day, time(minute // 60, minute % 60), tzinfo=tz)


def window_open_at(windows: Windows, tz_name: str, now: datetime) -> datetime | None:
    """``now`` when the window is open then, else the next opening (UTC), None if none in 3 weeks.

    Opening times are wall-clock times in ``tz_name``: on the day clocks change, 09:00 is
    still 09:00 local (a different UTC instant than the day before).
    """
    if windows.always:
        return now
    tz = ZoneInfo(tz_name)
    local_now = now.astimezone(tz)
    best: datetime | None = None
    for offset in range(0, 22):
        day = local_now.date() + timedelta(days=offset)
        if day in windows.skip_dates:
            continue
        for r in windows.ranges:
            if day.weekday() not in r.days:
                continue
            start = _local(day, r.start_min, tz).astimezone(UTC)
            end = _local(day, r.end_min, tz).astimezone(UTC)
            if start <= now < end:
                return now
            if start > now and (best is None or start < best):
                best = start
        if best is not None:
            return best
    return best


def in_window(windows: Windows, tz_name: str, now: datetime) -> bool:
    return window_open_at(windows, tz_name, now) == now


def check_timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise RuleError(f"timezone '{name}' is not an IANA timezone (e.g. America/New_York)") from None
    return name


def normalize_phone(text: str) -> str:
    """The number in E.164, or :class:`RuleError` saying why it is not one."""
    raw = text.strip()
    if not raw.startswith("+"):
        raise RuleError(f"phone '{raw[:32]}' is not in E.164 (it must start with + and the country code)")
    if any(ch.isalpha() for ch in raw):
        # phonenumbers reads letters as a keypad's (``+1212555CALL`` is +12125552255): a
        # number written so is a typo or a vanity number to spell out, never one to dial as is
        raise RuleError(f"phone '{raw[:32]}' has letters: write the number in digits")
    try:
        num = phonenumbers.parse(raw, None)
    except phonenumbers.NumberParseException as exc:
        raise RuleError(f"phone '{raw[:32]}': {exc}") from None
    if not phonenumbers.is_possible_number(num):
        raise RuleError(f"phone '{raw[:32]}' is not a possible number")
    return phonenumbers.format_number(num, phonenumbers.PhoneNumberFormat.E164)


def timezone_for(phone: str) -> str | None:
    """The number's timezone from its country and area code, when it has exactly one
    (``+1 212`` is New York; a country spanning several zones with no area hint: None)."""
    try:
        zones = pn_timezone.time_zones_for_number(phonenumbers.parse(phone, None))
    except phonenumbers.NumberParseException:
        return None
    zones = tuple(z for z in zones if z != pn_timezone.UNKNOWN_TIMEZONE)
    return zones[0] if len(zones) == 1 else None
