"""Time windows over prediction event time, and the buckets that tile them.

Statistics are kept per 5-minute and per hour bucket (a bucket is named by its UTC start). A
window ``[start, end)`` is read as the hour buckets it covers whole plus the 5-minute buckets at its
ragged ends, so a 7-day window sums at most 168 + 24 buckets whatever the traffic. Window bounds
are aligned to 5 minutes: the start rounds down and the end up (the 5 minutes holding ``now`` are
included whole), so a trailing ``1h`` reads between 60 and 65 minutes of event time.

A duration is the whole text ``<1 to 8 digits><s|m|h|d>`` (``24h\n`` is not ``24h``) of at most
``MAX_WINDOW``; explicit bounds come validated from the query (``service.web.queries``), within
years whose 5-minute rounding stays representable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

FINE = timedelta(minutes=5)
HOUR = timedelta(hours=1)
MAX_WINDOW = timedelta(days=400)
#: A duration: a positive integer and a unit (``90s``, ``15m``, ``24h``, ``7d``).
DURATION_PATTERN = re.compile(r"([1-9][0-9]{0,7})([smhd])")
DURATION_HINT = "expected <positive integer><s|m|h|d>, e.g. 1h, 24h, 7d"
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

RESOLUTION_FINE = "5m"
RESOLUTION_HOUR = "1h"


class WindowError(ValueError):
    """A window that cannot be read; ``field`` names the query parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_duration(text: str, limit: timedelta | None = MAX_WINDOW) -> timedelta:
    """``<int>[smhd]`` (``90s``, ``15m``, ``24h``, ``7d``) as a timedelta of up to ``limit``."""
    match = DURATION_PATTERN.fullmatch(text)
    if not match:
        raise WindowError("window", DURATION_HINT)
    duration = timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    if limit is not None and duration > limit:
        raise WindowError("window", "windows longer than 400 days are not kept")
    return duration


def floor_to(ts: datetime, step: timedelta) -> datetime:
    """The start of the ``step`` bucket holding ``ts`` (UTC, epoch-aligned)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((ts - epoch) // step) * step


def ceil_to(ts: datetime, step: timedelta) -> datetime:
    floored = floor_to(ts, step)
    return floored if floored == ts else floored + step


@dataclass(frozen=True)
class Window:
    """A half-open interval ``[start, end)`` of event time, aligned to 5-minute buckets.

    ``name`` is the trailing duration it was asked as (``24h``), or None for explicit bounds.
    """

    start: datetime
    end: datetime
    name: str | None = None

    @classmethod
    def trailing(cls, name: str, now: datetime) -> Window:
        duration = parse_duration(name)
        return cls(floor_to(now - duration, FINE), floor_to(now, FINE) + FINE, name)

    @classmethod
    def between(cls, start: datetime, end: datetime) -> Window:
        if end <= start:
            raise WindowError("end", "must be after start")
        if end - start > MAX_WINDOW:
            raise WindowError("end", "windows longer than 400 days are not kept")
        try:
            return cls(floor_to(start, FINE), ceil_to(end, FINE))
        except OverflowError:
            raise WindowError("end", "lies too close to the end of the calendar") from None

    def tiling(self) -> list[tuple[str, datetime, datetime]]:
        """``(resolution, first bucket start, end)`` ranges whose buckets tile the window."""
        first_hour, last_hour = ceil_to(self.start, HOUR), floor_to(self.end, HOUR)
        if first_hour >= last_hour:
            return [(RESOLUTION_FINE, self.start, self.end)]
        parts = [(RESOLUTION_HOUR, first_hour, last_hour)]
        if self.start < first_hour:
            parts.append((RESOLUTION_FINE, self.start, first_hour))
        if last_hour < self.end:
            parts.append((RESOLUTION_FINE, last_hour, self.end))
        return parts
