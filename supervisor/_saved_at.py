"""A checkpoint's ``saved_at`` as the stores keep it: whole microseconds since the epoch
(the ``saved_at_us`` column of both SQL stores), and back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["from_micros", "micros"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(moment: datetime) -> int:
    """``moment`` (timezone-aware) as whole microseconds since the epoch."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(us: int) -> datetime:
    """The UTC moment ``us`` microseconds after the epoch (``micros`` undone)."""
    return _EPOCH + timedelta(microseconds=us)
