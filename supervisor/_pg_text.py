"""What a PostgreSQL ``text`` column can hold, for the ids and labels the store keeps.

PostgreSQL text holds no NUL character, and UTF-8 no lone surrogate: a save of
such an id is refused (``check_text``), and a read of one finds nothing without
asking the server (``storable_text``), as no row can hold it. The cluster's lease
table checks its node and session ids the same way.
"""

from __future__ import annotations

from supervisor.checkpoint_store import encodable

__all__ = ["check_text", "may_exist", "storable_text"]


def storable_text(value: object) -> bool:
    """Whether ``value`` is a ``str`` a PostgreSQL ``text`` column can hold (no NUL
    character, no lone surrogate, which UTF-8 cannot encode): an id that is not can have
    no row, so a read of it finds nothing."""
    return isinstance(value, str) and "\x00" not in value and encodable(value)


def may_exist(session_id: object, checkpoint_id: object = None) -> bool:
    """Whether a row of these ids could have been stored (``storable_text``)."""
    return storable_text(session_id) and (checkpoint_id is None or storable_text(checkpoint_id))


def check_text(name: str, value: object) -> str:
    """``value`` if a PostgreSQL ``text`` column can store it.

    Raises:
        TypeError: not a ``str``.
        ValueError: it holds a NUL character, which PostgreSQL text cannot store (the
            SQLite and memory stores can: such an id cannot move to PostgreSQL).
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    at = value.find("\x00")
    if at >= 0:
        raise ValueError(
            f"{name} {value[:80]!r} holds a NUL character ('\\x00') at index {at}, which "
            "PostgreSQL text cannot store; use an id without it (e.g. replace it, or "
            "hex-encode such ids)"
        )
    return value
