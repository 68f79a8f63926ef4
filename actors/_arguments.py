"""Checks of what ``AgentSession`` is made with, where it is made.

A host passes checked values, but ``AgentSession`` is public, and an argument of the
wrong kind was taken as it came and failed the session later, far from the cause: a
``session_id`` that is not a ``str`` made every snapshot fail, so with a ``checkpointer``
every turn failed and was rolled back. Pure functions, thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors._codec import encode_plain
from actors._strip import first_live, is_flat_plain, strip_live
from actors.errors import SnapshotDecodeError, SnapshotEncodeError
from actors.template import AgentTemplate

__all__ = ["check_metadata", "check_session_arguments", "restored_turns", "session_id_of"]

_MAX_COUNT = 2**64 - 1
"""The largest count a checkpoint (msgpack) holds."""


def session_id_of(given: object, restored: Mapping[str, Any]) -> str | None:
    """The session id to use: ``given``, else the restored state's, else ``None`` (a new
    random one).

    Raises:
        TypeError, ValueError: ``given`` is not a non-empty ``str`` (nor ``None``).
        SnapshotDecodeError: the restored state's ``session_id`` is not a non-empty ``str``.
    """
    if given is not None:
        if not isinstance(given, str):
            raise TypeError(f"session_id must be a str or None, got {type(given).__name__}")
        if not given:
            raise ValueError("session_id must not be empty (None gives a new random one)")
        return given
    saved = restored.get("session_id")
    if saved is not None and (not isinstance(saved, str) or not saved):
        raise SnapshotDecodeError(
            f"state.session_id must be a non-empty str, got {type(saved).__name__} "
            f"{saved!r:.40}; pass session_id= or resume an older checkpoint"
        )
    return saved


def check_session_arguments(template: object, metadata: object, checkpointer: object) -> None:
    """Refuse a ``template``, ``metadata`` or ``checkpointer`` no session could work with.

    Raises:
        TypeError: ``template`` is not an ``AgentTemplate``, ``metadata`` is not a mapping
            (nor ``None``), or ``checkpointer`` cannot be called.
    """
    if not isinstance(template, AgentTemplate):
        raise TypeError(f"template must be an AgentTemplate, got {type(template).__name__}")
    if checkpointer is not None and not callable(checkpointer):
        raise TypeError(
            f"checkpointer must be callable (it gets each Snapshot), got {checkpointer!r:.60}"
        )
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping or None, got {type(metadata).__name__}")
    if metadata:
        check_metadata(metadata)


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """Refuse ``metadata`` a checkpoint could not hold, naming the path (``metadata.a``).

    Every snapshot of the session holds its metadata: metadata with a set, an object, an
    integer beyond 64 bits, a key that is not a ``str`` or a naive datetime started a
    session every snapshot of which then failed, and with a ``checkpointer`` every turn of
    which failed. A live value (``actors._strip``: a lock, a socket, a callable) is refused
    too: a snapshot stripped it to a marker, and since nothing rebuilds metadata on resume
    (a plugin's state has ``session_start``), the user found the marker in its place. Costs
    one walk and encoding of the metadata, as each snapshot does.

    Raises:
        SnapshotEncodeError: (a ``TypeError``) naming the path of the first value no
            checkpoint can hold, or of the first live value.
        ValueError: the metadata holds a reference cycle (naming where) or nests deeper
            than Python can walk.
    """
    if is_flat_plain(metadata):
        return
    try:
        plain, stripped = strip_live(metadata, root="metadata")
    except RecursionError:
        raise ValueError("metadata nests deeper than a checkpoint can hold") from None
    if stripped:
        _refuse_live(metadata)
    encode_plain(plain, root="metadata")


def _refuse_live(metadata: Mapping[str, Any]) -> None:
    """Raise ``SnapshotEncodeError`` naming the first live value of ``metadata`` (which
    ``strip_live`` walked: it holds no cycle)."""
    found = first_live(metadata, "metadata")
    if found is None:  # pragma: no cover - strip_live stripped something, first_live finds it
        return
    path, value = found
    kind = type(value)
    raise SnapshotEncodeError(
        path,
        value,
        f"a live {kind.__module__}.{kind.__qualname__}; session metadata must be plain data, "
        "which a checkpoint keeps and a resume gives back, and nothing would rebuild a "
        "live value there after a resume: keep live objects in a plugin's state (rebuilt "
        "by its session_start) or on a tool",
    )


def restored_turns(restored: Mapping[str, Any]) -> int:
    """The restored state's turn count (0 when it has none).

    ``int()`` of it took ``1.7`` as 1, ``True`` as 1 and ``"5"`` as 5, and a count beyond
    64 bits started a session no checkpoint of which could be saved.

    Raises:
        ValueError: it is not an ``int`` from 0 to 2**64 - 1 (the session reports a
            ``SnapshotDecodeError``).
    """
    turns = restored.get("turns", 0)
    if type(turns) is not int or not 0 <= turns <= _MAX_COUNT:
        raise ValueError(f"state.turns must be a count (an int >= 0), got {turns!r:.40}")
    return turns
