"""A session's history made storable once per message, for every later checkpoint to reuse.

Messages are immutable once appended, so the work a checkpoint does for one
(``Message.to_dict``, live-value stripping, strict msgpack encoding) gives the
same result every time. ``HistoryCodec`` does it once per message, the first
time a snapshot includes it, and keeps the results in append-only lists:

* ``plain``: the stripped dict of each message, as ``Snapshot.state["messages"]``
  holds it. Shared by every later snapshot: treat them as read-only.
* ``parts``: the msgpack encoding of each message. ``serialize()`` and the
  SQLite store's message log use these bytes instead of encoding the history
  again. One that strict encoding refuses gets none, and no snapshot gets the
  shortcut while it is in the history: they take the full path, which names it.

A snapshot carries the result as ``EncodedMessages``: the shared lists and the
count, from which its own list of message dicts is made only if its ``state`` is
read. A checkpoint of a 2,000-message session, or a 40,000-message one, costs
what its last turn added, not its history.

Lists handed out are only ever appended to: ``truncate`` (a rolled-back turn)
replaces them with shorter copies, so a snapshot, or a store that remembers
``parts`` by identity (``lineage``), never sees an entry change under it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import msgpack

from actors._codec import check_keys, cut_items, pack_each, pack_plain
from actors._strip import STRIPPED_KEY, strip_live
from actors.errors import SnapshotEncodeError
from actors.messages import Message

__all__ = ["EncodedMessages", "HistoryCodec"]

_MARKER_START = b"\x81" + msgpack.packb(STRIPPED_KEY)
"""How a stripped marker's encoding begins: a map of one entry, then the marker's key."""


class EncodedMessages:
    """The messages of one snapshot, already encoded. Thread-safe.

    ``messages()`` makes the snapshot's list of message dicts the first time it is
    asked for: a store needs only ``parts``, and a list of 40,000 references costs
    about 80 us to make and as much again to free, at every checkpoint of a long
    session (``actors.snapshot._SessionSnapshot``).

    Attributes:
        parts: The encoding of each message, shared with the session and its other
            snapshots: read only ``parts[:count]``. Its identity is the *lineage*:
            two snapshots with the same ``parts`` list agree on every message both have.
        count: How many messages the snapshot has.
    """

    __slots__ = ("_made", "_plain", "count", "parts")

    def __init__(self, plain: list[dict[str, Any]], parts: list[bytes], count: int) -> None:
        """``plain`` and ``parts``: lists whose first ``count`` entries are the snapshot's
        message dicts and their encodings, and which are only ever appended to."""
        self._plain = plain
        self.parts = parts
        self.count = count
        self._made: list[dict[str, Any]] | None = None

    def messages(self) -> list[dict[str, Any]]:
        """The snapshot's message dicts: a list made on the first call, the same list after."""
        made = self._made
        if made is None:
            with _MAKING:  # two threads asking at once get the same list
                made = self._made
                if made is None:
                    made = self._made = self._plain[: self.count]
        return made

    def of(self, state: dict[str, Any]) -> bool:
        """Whether these are the encodings of ``state``'s messages: it holds the list
        ``messages()`` made (a state rebuilt around other messages drops the shortcut)."""
        made = self._made
        return made is not None and len(made) == self.count and state.get("messages") is made

    def data(self, start: int = 0) -> bytes:
        """The encodings of messages ``start`` to ``count``, back to back."""
        return b"".join(self.parts[start : self.count])


_MAKING = threading.Lock()
"""Held while an ``EncodedMessages`` makes its list (rarely: a checkpoint needs none)."""


class HistoryCodec:
    """Strips and encodes each message of a session once (see the module docstring).

    Not thread-safe: used on the session's own thread. What it hands out is.
    """

    __slots__ = ("_bad", "_parts", "_plain", "_seed", "_seed_encoding", "_stripped")

    def __init__(self) -> None:
        self._plain: list[dict[str, Any]] = []
        self._parts: list[bytes] = []
        self._stripped: list[tuple[int, tuple[str, ...]]] = []  # (index, paths), by index
        self._bad: list[int] = []  # indices strict encoding refused, ascending
        self._seed: list[dict[str, Any]] = []
        self._seed_encoding: bytes | None = None

    def seed(self, plain: list[dict[str, Any]], encoding: bytes | None = None) -> None:
        """Take ``plain`` as ``to_dict`` of the first ``len(plain)`` messages, which are then
        never read: the dicts of a resumed checkpoint that are exactly what ``to_dict``
        writes, every value of an exact plain type (``actors._restored``), so a snapshot
        holds them as they are, with nothing to strip. ``encoding``, if given, is their
        encodings back to back as a store read them, vouched for
        (``actors.snapshot.checked_encoding``): they are cut from it instead of encoded
        again (msgpack's encoding of what it decoded from our own bytes is those bytes).
        Call it before any snapshot."""
        if self._plain:
            raise RuntimeError("seed() after a snapshot: the codec has seen messages already")
        self._seed = plain
        self._seed_encoding = encoding

    def __len__(self) -> int:
        return len(self._plain)

    def snapshot_part(
        self, messages: Sequence[Message] | Sequence[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]] | None, tuple[str, ...], EncodedMessages | None]:
        """Bring the codec up to date with ``messages`` (which extend what it has seen).

        The entries the ``seed`` covers are not read: a session whose restored history
        is not built yet passes the seed itself.

        Returns:
            The stripped message dicts, the paths stripped in them
            (``messages[3].tool_calls[0].arguments.conn``), and their encodings; either
            the encodings (which make the list of dicts when asked: the first item is
            then ``None``), or a new list of the dicts and ``None`` when a message cannot
            be encoded (the snapshot then takes the full path, which reports it).

        Raises:
            ValueError: a message holds a reference cycle (as ``strip_live``).
        """
        count = len(messages)
        seeded = min(len(self._seed), count)
        if len(self._plain) < seeded:
            self._add_seeded(seeded)
        for index in range(len(self._plain), count):
            self._add(index, messages[index])
        paths: tuple[str, ...] = ()
        for _, found in self._stripped:
            paths += found
        if self._bad:
            return self._plain[:count], paths, None
        return None, paths, EncodedMessages(self._plain, self._parts, count)

    def _add_seeded(self, stop: int) -> None:
        """Add the seed's entries up to ``stop``: cut from the store's bytes when ``seed`` was
        given them (a third of encoding them again), else encoded in one call (``pack_each``),
        less than half of packing them one by one. If one cannot be encoded, none is added
        here: ``_add`` takes them one at a time and marks it."""
        start = len(self._plain)
        seed = self._seed[start:stop]
        parts = None
        whole = self._seed_encoding
        if start == 0 and whole is not None:  # the store's bytes, cut
            cut = cut_items(whole, len(self._seed))
            parts = None if cut is None else cut[:stop]
        self._seed_encoding = None  # used once: later seed entries come from its cut or not
        if parts is None:
            parts = pack_each(seed)
            whole = None
        if parts is not None:
            self._plain.extend(seed)
            self._parts.extend(parts)
            # One search of all the bytes (a few us), then of each message only if found.
            if _MARKER_START in (b"".join(parts) if whole is None else whole):
                for index, part in enumerate(parts, start):
                    self._note_markers(index, part)

    def _note_markers(self, index: int, part: bytes) -> None:
        """Record the paths of the stripped markers a seeded message holds (stripped in an
        earlier life of the session), as a walk of the whole state lists them. Only a
        message whose encoding holds a marker's first bytes (or has none) is walked."""
        if part and _MARKER_START not in part:
            return
        _, found = strip_live(self._seed[index], root=f"messages[{index}]")
        if found:
            self._stripped.append((index, found))

    def _add(self, index: int, message: Message | dict[str, Any]) -> None:
        # The encodings' errors are not raised here (a message that fails is marked bad, and
        # the snapshot's full path names it): only a strip's paths need the message's root.
        stripped: tuple[str, ...] = ()
        if index < len(self._seed):  # exact plain values already: nothing to strip or check
            plain = self._seed[index]
            try:
                part = pack_plain(plain)
            except SnapshotEncodeError:
                part = b""
                self._bad.append(index)
            self._plain.append(plain)
            self._parts.append(part)
            self._note_markers(index, part)
            return
        assert isinstance(message, Message)
        plain = message.to_dict()
        try:
            if all(value is None or type(value) is str for value in plain.values()):
                part = pack_plain(plain)  # nothing to strip or walk
            else:  # tool calls (the model's arguments may hold anything): in full
                plain, stripped = strip_live(plain, root=f"messages[{index}]")
                part = pack_plain(plain)
                check_keys(plain)
        except SnapshotEncodeError:
            part = b""
            self._bad.append(index)
        self._plain.append(plain)
        self._parts.append(part)
        if stripped:
            self._stripped.append((index, stripped))

    def truncate(self, count: int) -> None:
        """Forget the messages from ``count`` on (a rolled-back turn), without changing
        any list already handed out."""
        if count >= len(self._plain) and count >= len(self._seed):
            return
        self._plain = self._plain[:count]
        self._parts = self._parts[:count]
        self._seed = self._seed[:count]
        self._seed_encoding = None  # it held the longer seed
        self._stripped = [(i, p) for i, p in self._stripped if i < count]
        self._bad = [i for i in self._bad if i < count]
