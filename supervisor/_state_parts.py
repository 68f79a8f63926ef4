"""Plugin and provider states stored once per content, shared by the checkpoints that hold them.

A session checkpointed after every turn mostly saves the same plugin states
again: one 100 MB value would cost 100 MB per checkpoint. So the SQLite store
takes each large one out of the checkpoint body (a *part*), keeps it once per
session under the SHA-256 of its bytes, and lets every checkpoint with the
same bytes refer to it. This module is the pure half of that scheme:

* ``take_parts`` replaces, in a snapshot's plain state, each plugin state and
  the provider state whose encoding is ``PART_MIN_BYTES`` or more by ``None``
  and returns them as ``StatePart``\\ s (smaller ones stay in the body: a row
  of their own would cost more than it saves);
* ``part_refs`` is what the checkpoint row stores to name its parts (sealed
  with the body, see ``_message_log.seal``), and ``read_refs`` reads it back;
* ``put_parts`` puts the verified parts back into a decoded body.

``None`` is one byte, so the size of ``serialize()`` is the body's size, less
one byte per part, plus the parts' sizes. Pure functions, thread-safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from actors import SnapshotDecodeError, decode_plain, encode_plain
from actors._codec import join_path

__all__ = [
    "PART_MIN_BYTES",
    "StatePart",
    "checked",
    "part_refs",
    "put_parts",
    "read_refs",
    "take_parts",
]

PART_MIN_BYTES = 4096
"""Smallest encoded plugin or provider state stored as a shared part instead of in the body."""


@dataclass(frozen=True, slots=True)
class StatePart:
    """One plugin's state, or the provider state, taken out of a checkpoint body.

    Attributes:
        kind: ``"plugins"`` or ``"provider_state"``: the key of the state it sits under.
        name: The plugin's name; ``None`` for the provider state.
        data: Its msgpack encoding.
        digest: SHA-256 of ``data``: its key in the store, and its check on load.
    """

    kind: str
    name: str | None
    data: bytes
    digest: bytes

    @property
    def path(self) -> str:
        """Where it sits in the snapshot: ``state.plugins.<name>`` or ``state.provider_state``."""
        parent = join_path("state", self.kind)
        return parent if self.name is None else join_path(parent, self.name)


def _part(kind: str, name: str | None, value: object, root: str) -> StatePart | None:
    data = encode_plain(value, root=root)
    if len(data) < PART_MIN_BYTES:
        return None
    return StatePart(kind, name, data, hashlib.sha256(data).digest())


def take_parts(state: dict[str, Any]) -> tuple[StatePart, ...]:
    """Take the large plugin states and provider state out of ``state``, in place.

    ``state`` must be a copy the caller owns (its ``plugins`` dict is replaced
    by a copy when a plugin's state is taken, never changed).

    Raises:
        actors.SnapshotEncodeError: a part is not plain (its path is named).
    """
    parts: list[StatePart] = []
    plugins = state.get("plugins")
    if type(plugins) is dict:
        kept = dict(plugins)
        for name, value in plugins.items():
            if type(name) is str and type(value) is dict:
                part = _part("plugins", name, value, join_path("state.plugins", name))
                if part is not None:
                    kept[name] = None
                    parts.append(part)
        if parts:
            state["plugins"] = kept
    provider = state.get("provider_state")
    if type(provider) is dict:
        part = _part("provider_state", None, provider, "state.provider_state")
        if part is not None:
            state["provider_state"] = None
            parts.append(part)
    return tuple(parts)


def part_refs(parts: Sequence[StatePart]) -> bytes | None:
    """What a checkpoint row stores to name its parts (``None`` when it has none)."""
    if not parts:
        return None
    return encode_plain([[p.kind, p.name, p.digest] for p in parts])


def read_refs(refs: object) -> list[tuple[str, str | None, bytes]]:
    """The ``(kind, name, digest)`` of each part ``refs`` names (``[]`` for ``None``).

    Raises:
        SnapshotDecodeError: ``refs`` is not what ``part_refs`` writes.
    """
    if refs is None:
        return []
    found = decode_plain(refs)
    if not isinstance(found, list):
        raise SnapshotDecodeError("the checkpoint's state part references are damaged")
    result = []
    for item in found:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and item[0] in ("plugins", "provider_state")
            and (item[1] is None) == (item[0] == "provider_state")
            and (item[1] is None or isinstance(item[1], str))
            and isinstance(item[2], bytes)
        ):
            raise SnapshotDecodeError("the checkpoint's state part references are damaged")
        result.append((item[0], item[1], item[2]))
    return result


def put_parts(plain: object, parts: Iterable[tuple[str, str | None, bytes]]) -> None:
    """Put each part ``(kind, name, data)`` back into the decoded body ``plain``, in place.

    Each ``data`` must have passed ``checked``.

    Raises:
        SnapshotDecodeError: the body has no place holder for a part.
    """
    state = plain.get("state") if isinstance(plain, dict) else None
    if not isinstance(state, dict):
        raise SnapshotDecodeError("body has no state to put its state parts in")
    for kind, name, data in parts:
        holder: object = state if name is None else state.get(kind)
        key = kind if name is None else name
        if not isinstance(holder, dict) or key not in holder or holder[key] is not None:
            raise SnapshotDecodeError(f"body has no place holder for its part {kind}.{name}")
        holder[key] = decode_plain(data)


def checked(kind: str, name: str | None, digest: bytes, data: object) -> bytes:
    """``data``, a stored part, if it is there and matches ``digest``.

    Raises:
        SnapshotDecodeError: it is missing or damaged.
    """
    where = kind if name is None else f"{kind}.{name}"
    if not isinstance(data, bytes):
        raise SnapshotDecodeError(f"state part {where} is missing")
    if hashlib.sha256(data).digest() != digest:
        raise SnapshotDecodeError(f"state part {where} does not match its digest (damaged)")
    return data
