"""``Snapshot``: the serializable half of an agent session.

A snapshot carries what is needed to resume a conversation (messages, usage,
the model string, plugin states, provider state, metadata) and nothing that
cannot or must not be persisted: live values are stripped when it is made
(see ``actors._strip``), secrets can be dropped with ``redact``, and
``serialize`` refuses anything that is not a plain value instead of pickling
it. ``deserialize`` turns any bad input into one error type,
``SnapshotDecodeError``, and upgrades older schema versions.

The session state shape the accessors read (what ``AgentSession.state()``
returns)::

    {"session_id": str, "messages": [Message.to_dict(), ...], "usage": Usage.to_dict(),
     "metadata": dict, "model": str, "instructions": str | None,
     "plugins": {name: dict}, "provider_state": dict | None, "turns": int,
     "steering": [str]}  # the last only while steering waits for a model call

On naming: the seed exposes both a ``schema_version`` field and a
``schema_version()`` function. A dataclass cannot have a field and a method of
one name, so the field keeps the name (it is the data), the class-level
function is ``Snapshot.current_schema_version()``, and the seed's function is
the module-level ``schema_version()``; ``SCHEMA_VERSION`` is the constant.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, ClassVar

from actors._codec import (
    array_header,
    check_keys,
    check_plain,
    decode_plain,
    encode_plain,
    join_path,
    map_header,
    pack_plain,
)
from actors._history import EncodedMessages
from actors._ids import PROCESS_IDS
from actors._strip import PLAIN_SCALARS as _PLAIN_SCALARS
from actors._strip import STRIPPED_KEY, strip_live
from actors.errors import InvalidMessage, SnapshotDecodeError, SnapshotEncodeError
from actors.messages import Message, Usage
from actors.migrations import SCHEMA_VERSION, SNAPSHOT_MIGRATIONS, MigrationRegistry

__all__ = [
    "SCHEMA_VERSION",
    "Snapshot",
    "checked_encoding",
    "checked_messages",
    "encoded_messages",
    "mark_checked",
    "parts_state",
    "schema_version",
    "session_snapshot",
    "storage_dict",
    "with_encoded_messages",
]

_FIELDS = (
    "schema_version",
    "checkpoint_id",
    "session_id",
    "saved_at",
    "label",
    "metadata",
    "state",
    "stripped_fields",
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_IDS = PROCESS_IDS  # with every other id of the process: they sort as made


def schema_version() -> int:
    """The snapshot schema version this code writes (the seed's ``schema_version()``)."""
    return SCHEMA_VERSION


def _all_str(items: Iterable[object]) -> bool:
    """Whether every item is a ``str`` (a subclass included); one pass in C (``str.join``
    refuses anything else)."""
    try:
        "".join(items)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


@dataclass(frozen=True, kw_only=True, repr=False)
class Snapshot:
    """A checkpoint of one session's conversational state.

    Make one with ``Snapshot.new`` (or ``AgentSession.snapshot``), not the
    constructor: ``new`` generates the id and timestamp and strips live values.
    Equality compares every field; a deserialized snapshot equals the original.
    The hash is the hash of ``checkpoint_id``.

    Thread-safety: the dataclass is frozen, and no method mutates ``state`` or
    ``metadata``; it is safe to share between threads as long as nobody
    mutates those dicts in place (treat them as read-only; use ``redact`` to
    derive a changed snapshot). A running session's snapshots share their
    message dicts with each other: mutating one would change the others. Such a
    snapshot (``AgentSession.snapshot``) is of a private subclass that makes its
    ``state["messages"]`` list when ``state`` is first read, so that a checkpoint,
    which needs only the messages' encodings, costs the turn and not the history:
    test ``isinstance(s, Snapshot)``, not ``type(s) is Snapshot``.

    Attributes:
        schema_version: Schema the snapshot is in (``SCHEMA_VERSION`` for new ones).
        checkpoint_id: Unique id, sortable by creation time (32 hex digits).
        session_id: The session it belongs to.
        saved_at: When it was made, timezone-aware (UTC).
        label: Optional human label (``"before-deploy"``).
        metadata: Free-form plain values chosen by the caller.
        state: The session's plain state (see the module docstring for its shape).
        stripped_fields: Paths in ``state`` where live values were replaced by
            ``{"__stripped__": "<type>"}`` markers, e.g. ``plugins.db.conn``.
    """

    schema_version: int
    checkpoint_id: str
    session_id: str
    saved_at: datetime
    label: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    stripped_fields: tuple[str, ...] = ()
    _encoded: EncodedMessages | None = field(default=None, compare=False)
    """Private: the messages already encoded (``session_snapshot``); used by ``serialize``
    and the stores only while ``state["messages"]`` is the list they were made for."""
    _checked: tuple[list[Any], bytes | None] | None = field(default=None, compare=False, repr=False)
    """Private: ``state["messages"]`` as a store read it back from a session's own
    encodings, and those encodings back to back when the store has them
    (``checked_messages``, ``checked_encoding``); vouches only while the state holds
    that list."""

    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    def __post_init__(self) -> None:
        # Every check is a plain test that builds its message only when it fails: a
        # snapshot is made (and validated) at every checkpoint of every turn.
        v = self.schema_version
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError("schema_version: not an int")
        if v < 1:
            raise ValueError(f"schema_version must be >= 1, got {v}")
        for name in ("checkpoint_id", "session_id"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str")
            if not value:
                raise ValueError(f"{name} must not be empty")
        if not isinstance(self.saved_at, datetime):
            raise TypeError("saved_at must be a datetime")
        if self.saved_at.utcoffset() is None:
            raise ValueError("saved_at must be timezone-aware")
        if self.label is not None and not isinstance(self.label, str):
            raise TypeError("label: not a str")
        for name in ("metadata", "state"):
            value = getattr(self, name)
            if not isinstance(value, dict):
                raise TypeError(f"{name} must be a dict")
            if not _all_str(value):
                raise TypeError(f"{name} keys must be str")
        fields = self.stripped_fields
        if not isinstance(fields, list | tuple):
            raise TypeError("stripped_fields must be a tuple")
        if not _all_str(fields):
            raise TypeError("stripped_fields: not str")
        if not isinstance(fields, tuple):
            object.__setattr__(self, "stripped_fields", tuple(fields))

    def __hash__(self) -> int:
        return hash(self.checkpoint_id)

    def __repr__(self) -> str:
        count = _message_count(self)
        return (
            f"Snapshot(session_id={self.session_id!r}, checkpoint_id={self.checkpoint_id!r}, "
            f"saved_at={self.saved_at.isoformat()}, label={self.label!r}, "
            f"messages={count}, stripped_fields={self.stripped_fields!r})"
        )

    @classmethod
    def current_schema_version(cls) -> int:
        """The schema version this code writes (``Snapshot.schema_version()`` in the seed)."""
        return SCHEMA_VERSION

    @classmethod
    def new(
        cls,
        *,
        session_id: str,
        state: Mapping[str, Any] | object,
        label: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Make a snapshot now: fresh ``checkpoint_id`` and ``saved_at``, live values stripped.

        Args:
            session_id: The session's id; required, a non-empty string.
            state: The session's state, a mapping (or a dataclass instance, taken
                as the dict of its fields). Copied; live values anywhere inside
                are replaced by markers and listed in ``stripped_fields``.
            label: Optional human label.
            metadata: Optional plain values; copied but not stripped (a live
                value there is an error that ``serialize`` reports).

        Returns:
            The new snapshot.

        Raises:
            TypeError: ``session_id`` is not a string, ``state`` is not a mapping,
                ``label`` is not a string, or ``metadata`` is not a mapping.
            ValueError: ``session_id`` is empty, or ``state`` contains a reference cycle.
        """
        _check_new(session_id, label, metadata)
        plain_state, stripped = strip_live(state)
        if not isinstance(plain_state, dict):
            raise TypeError(f"state must be a mapping, got {type(state).__name__}")
        return _made_now(cls, session_id, label, metadata, plain_state, stripped, None)

    def with_metadata(self, metadata: dict[str, Any]) -> Snapshot:
        """This snapshot with ``metadata`` (taken as it is, not copied) in place of its own.

        What ``dataclasses.replace(snapshot, metadata=metadata)`` returns, without checking
        the unchanged fields again: a host stamps every checkpoint it saves this way.

        Raises:
            TypeError: ``metadata`` is not a dict with ``str`` keys.
        """
        if not isinstance(metadata, dict):
            raise TypeError("metadata must be a dict")
        if not _all_str(metadata):
            raise TypeError("metadata keys must be str")
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        object.__setattr__(copy, "metadata", metadata)
        return copy

    def redact(self, fn: Callable[[dict[str, Any]], Mapping[str, Any]]) -> Snapshot:
        """A new snapshot whose state is ``fn(state)``; every other field unchanged.

        ``fn`` receives a deep copy, so it may modify it in place and return it.
        Use ``redact(redact_secrets)`` to drop secret-looking keys.

        Raises:
            TypeError: ``fn`` returned something that is not a mapping.
        """
        result = fn(copy.deepcopy(self.state))
        if not isinstance(result, Mapping):
            raise TypeError(f"redact function must return a mapping, got {type(result).__name__}")
        return replace(self, state=dict(result))

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as a plain dict (the serialized form before encoding).

        Shares ``state`` and ``metadata`` with this snapshot: do not mutate them.
        """
        return _as_dict(self, self.state)

    @classmethod
    def from_dict(cls, data: object, *, migrations: MigrationRegistry | None = None) -> Snapshot:
        """Rebuild a snapshot from ``to_dict`` output, upgrading older schema versions.

        Args:
            data: A plain dict as ``to_dict`` returns (or ``decode_plain`` yields).
            migrations: Registry to upgrade with; ``SNAPSHOT_MIGRATIONS`` by default.

        Raises:
            SnapshotDecodeError: not a dict, a field missing, unknown or of the
                wrong type, a schema newer than supported, or a failed migration.
        """
        registry = SNAPSHOT_MIGRATIONS if migrations is None else migrations
        if not isinstance(data, dict):
            raise SnapshotDecodeError(f"expected a map at the top, got {type(data).__name__}")
        found = data.get("schema_version")
        if isinstance(found, bool) or not isinstance(found, int) or found < 1:
            raise SnapshotDecodeError(f"schema_version must be an integer >= 1, got {found!r}")
        if found != registry.current_version:
            data = registry.upgrade(data, found)
        keys = set(data)
        if keys != set(_FIELDS):
            missing = sorted(set(_FIELDS) - keys)
            unknown = sorted(map(str, keys - set(_FIELDS)))
            raise SnapshotDecodeError(f"fields missing: {missing}, unknown: {unknown}")
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise SnapshotDecodeError(f"wrong field type: {exc}") from None

    def serialize(self) -> bytes:
        """Strict msgpack bytes of this snapshot. Never pickles.

        A snapshot of a running session (``AgentSession.snapshot``) reuses the
        encodings its messages got when they were first checkpointed; the bytes
        are the same as the full encoding's.

        Raises:
            SnapshotEncodeError: a value is not plain (None, bool, int, float, str,
                bytes, list, tuple, dict with str keys, aware datetime); the error
                names its path, e.g. ``state.plugins.db.handler``.
        """
        plain, encoded = storage_dict(self)
        if encoded is not None:
            try:
                return _encode_reusing(plain, encoded)
            except SnapshotEncodeError:
                plain = self.to_dict()  # the full encoding below names the problem, as always
        return encode_plain(plain)

    @classmethod
    def deserialize(cls, data: object, *, migrations: MigrationRegistry | None = None) -> Snapshot:
        """Read bytes from ``serialize``, upgrading older schema versions.

        Raises:
            SnapshotDecodeError: for anything malformed (not bytes, not msgpack,
                truncated, trailing bytes, wrong types, missing fields, unknown
                extension) and for a schema newer than this code (the message
                names the version found and the one supported). Never another type.
        """
        return cls.from_dict(decode_plain(data), migrations=migrations)

    def to_json(self, *, indent: int | None = None) -> str:
        """The snapshot as JSON, for humans and tools (not read back by this package).

        Datetimes become ISO-8601 strings and bytes ``{"__bytes__": "<base64>"}``.

        Raises:
            SnapshotEncodeError: as ``serialize``.
        """
        plain = self.to_dict()
        check_plain(plain)
        return json.dumps(plain, default=_json_default, indent=indent, ensure_ascii=False)

    def messages(self) -> list[Message]:
        """The message history as ``Message`` objects; ``[]`` when there is none.

        Raises:
            SnapshotDecodeError: ``state["messages"]`` is not a list or an entry is malformed.
        """
        raw = self.state.get("messages")
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise SnapshotDecodeError(f"state.messages must be a list, got {type(raw).__name__}")
        result = []
        for index, item in enumerate(raw):
            try:
                result.append(Message.from_dict(item))
            except InvalidMessage as exc:
                raise SnapshotDecodeError(f"state.messages[{index}]: {exc}") from None
        return result

    def usage(self) -> Usage:
        """Accumulated token usage; zero usage when the state has none.

        Raises:
            SnapshotDecodeError: ``state["usage"]`` is malformed.
        """
        raw = self.state.get("usage")
        if raw is None:
            return Usage()
        try:
            return Usage.from_dict(raw)
        except InvalidMessage as exc:
            raise SnapshotDecodeError(f"state.usage: {exc}") from None

    def steering(self) -> list[str]:
        """Steering texts that were waiting for the session's next model call when this
        checkpoint was taken (none when the state has no ``steering`` entry).

        Raises:
            SnapshotDecodeError: ``state["steering"]`` is not a list of strings.
        """
        return saved_steering(self.state)

    @property
    def provider_state(self) -> dict[str, Any] | None:
        """The provider's serializable state, or ``None``.

        Raises:
            SnapshotDecodeError: ``state["provider_state"]`` is neither a dict nor None.
        """
        raw = self.state.get("provider_state")
        if raw is not None and not isinstance(raw, dict):
            raise SnapshotDecodeError(
                f"state.provider_state must be a dict or null, got {type(raw).__name__}"
            )
        return raw


def saved_steering(state: Mapping[str, Any]) -> list[str]:
    """The steering a session state saved as waiting (``state["steering"]``; none if absent).

    Raises:
        SnapshotDecodeError: it is not a list of strings.
    """
    raw = state.get("steering")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SnapshotDecodeError(
            f"state.steering must be a list of strings, got {type(raw).__name__}"
        )
    for index, text in enumerate(raw):
        if not isinstance(text, str):
            raise SnapshotDecodeError(
                f"state.steering[{index}] must be a string, got {type(text).__name__}"
            )
    return list(raw)


def _check_new(session_id: object, label: object, metadata: object) -> None:
    """The argument checks of ``Snapshot.new`` (see there)."""
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")
    if not session_id:
        raise ValueError("session_id is required and must not be empty")
    if label is not None and not isinstance(label, str):
        raise TypeError(f"label must be a str or None, got {type(label).__name__}")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping or None, got {type(metadata).__name__}")


def _made_now(  # noqa: PLR0917 (private; its two callers pass every part)
    cls: type[Snapshot],
    session_id: str,
    label: str | None,
    metadata: Mapping[str, Any] | None,
    state: dict[str, Any],
    stripped: tuple[str, ...],
    encoded: EncodedMessages | None,
) -> Snapshot:
    plain_metadata = strip_live(metadata, strip=False)[0] if metadata else {}
    checkpoint_id, now_ns = _IDS.new()
    return cls(
        schema_version=SCHEMA_VERSION,
        checkpoint_id=checkpoint_id,
        session_id=session_id,
        saved_at=_EPOCH + timedelta(microseconds=now_ns // 1000),
        label=label,
        metadata=plain_metadata,
        state=state,
        stripped_fields=stripped,
        _encoded=encoded,
    )


def session_snapshot(
    *,
    session_id: str,
    state: dict[str, Any],
    messages: list[dict[str, Any]] | None,
    message_paths: tuple[str, ...],
    encoded: EncodedMessages | None,
    label: str | None = None,
) -> Snapshot:
    """``Snapshot.new`` for a session whose messages are stripped already (``HistoryCodec``).

    ``state`` holds every part but the messages (its ``"messages"`` key, if any,
    is replaced by the messages, in its place). It is the session's own fresh copy
    (``AgentSession._state``), which the snapshot takes over: its other parts are
    stripped as ``new`` strips them, in place, and a flat one (usage, most metadata),
    which a strip would only copy, is kept as it is. The result, ``stripped_fields``
    order included, is what ``Snapshot.new`` returns for the whole state. The
    messages are ``messages``, or when that is ``None`` the list ``encoded`` makes the
    first time the snapshot's ``state`` is read (``_SessionSnapshot``); the dicts in it
    are shared with the session's later snapshots: they are never mutated.

    Raises:
        TypeError, ValueError: as ``Snapshot.new``.
    """
    _check_new(session_id, label, None)
    plain = state
    stripped: list[str] = []
    for key, value in state.items():  # (values replaced in place: no key is added)
        if key == "messages":
            if messages is not None:
                plain[key] = messages
            stripped += message_paths
        elif type(value) in _PLAIN_SCALARS or _flat(value):  # nothing a strip would change
            continue
        else:
            plain[key], found = strip_live(value, root=join_path("", key))
            stripped += found
    checkpoint_id, now_ns = _IDS.new()
    # Every field is valid by construction (the keys of ``plain`` are ``state``'s, which a
    # session writes; the paths are strings): made without ``__post_init__``'s checks.
    lazy = messages is None and encoded is not None and "messages" in plain
    snapshot = object.__new__(_SessionSnapshot if lazy else Snapshot)
    snapshot.__dict__.update(
        schema_version=SCHEMA_VERSION,
        checkpoint_id=checkpoint_id,
        session_id=session_id,
        saved_at=_EPOCH + timedelta(microseconds=now_ns // 1000),
        label=label,
        metadata={},
        stripped_fields=tuple(stripped),
        _encoded=encoded,
        _checked=None,
    )
    if lazy:
        snapshot.__dict__["_unmade_state"] = plain  # "messages": a place holder
    else:
        if messages is None and "messages" in plain:  # pragma: no cover - a caller's bug
            raise ValueError("session_snapshot() needs messages or their encodings")
        snapshot.__dict__["state"] = plain
    return snapshot


class _SessionSnapshot(Snapshot):
    """A running session's snapshot (``session_snapshot``) whose ``state["messages"]`` list
    is made the first time ``state`` is read, from its ``EncodedMessages``.

    A checkpoint needs only the messages' encodings: a list of 40,000 message
    references costs about 80 us to make and as much again to free, at every
    checkpoint of a long session. In every other way it is a ``Snapshot``: the same
    fields, equal to a ``Snapshot`` of equal fields (a deserialized copy), the same
    hash; only ``type(snapshot) is Snapshot`` tells them apart. Thread-safe as a
    ``Snapshot``: two threads reading ``state`` at once get the same dict.
    """

    @property  # the dataclass field, made when first read
    def state(self) -> dict[str, Any]:
        held = self.__dict__
        state: dict[str, Any] | None = held.get("_made_state")
        if state is None:
            made = dict(held["_unmade_state"])
            made["messages"] = held["_encoded"].messages()
            state = held.setdefault("_made_state", made)
        return state

    @state.setter
    def state(self, value: dict[str, Any]) -> None:  # the dataclass __init__ (``replace``)
        self.__dict__["_made_state"] = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return _compared(self) == _compared(other)

    __hash__ = Snapshot.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (and copied) as the plain ``Snapshot`` it equals: not with the session's
        # whole lists, which hold the messages of its later turns too.
        return (_plain_snapshot, _compared(self))


def _plain_snapshot(*values: Any) -> Snapshot:
    return Snapshot(**dict(zip(_FIELDS, values, strict=True)))


def with_encoded_messages(snapshot: Snapshot, encoded: EncodedMessages) -> Snapshot:
    """``snapshot`` with the messages ``encoded`` holds in place of its own (its state's
    ``"messages"`` key, which it must have), their list made only if ``state`` is read: a
    worker's checkpoint, rebuilt on the host from the messages it has already and those
    the worker sent."""
    unmade = dict(snapshot.state)
    if "messages" not in unmade:
        raise ValueError("with_encoded_messages() needs a state with a messages entry")
    copy = object.__new__(_SessionSnapshot)
    held = copy.__dict__
    held.update(snapshot.__dict__)
    held.pop("state", None)
    held.pop("_made_state", None)
    held.update(_unmade_state=unmade, _encoded=encoded, _checked=None)
    return copy


def _compared(snapshot: Snapshot) -> tuple[Any, ...]:
    """The fields ``Snapshot``'s equality compares."""
    return tuple(getattr(snapshot, name) for name in _FIELDS)


def _unmade_state(snapshot: Snapshot) -> dict[str, Any] | None:
    """The state of a ``_SessionSnapshot`` whose message list is not made yet (its
    ``"messages"`` a place holder), else ``None``."""
    held = snapshot.__dict__
    if "_made_state" in held:
        return None
    unmade: dict[str, Any] | None = held.get("_unmade_state")
    return unmade


def _message_count(snapshot: Snapshot) -> int:
    encoded = encoded_messages(snapshot)
    if encoded is not None:
        return encoded.count
    messages = snapshot.state.get("messages")
    return len(messages) if isinstance(messages, list) else 0


def storage_dict(snapshot: Snapshot) -> tuple[dict[str, Any], EncodedMessages | None]:
    """``snapshot.to_dict()`` and ``encoded_messages(snapshot)``, without making a running
    session's message list: where the encodings are given, the dict's
    ``state["messages"]`` is not to be read (it may be a place holder). For a store or a
    codec, which encode the messages from ``EncodedMessages.parts``."""
    return _as_dict(snapshot, parts_state(snapshot)), encoded_messages(snapshot)


def parts_state(snapshot: Snapshot) -> dict[str, Any]:
    """``snapshot.state`` for a reader of its parts other than the messages: a running
    session's snapshot whose message list is not made yet gives its state with a place
    holder for them, so that the list is not made for nothing."""
    unmade = _unmade_state(snapshot)
    return snapshot.state if unmade is None else unmade


def _as_dict(snapshot: Snapshot, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": snapshot.schema_version,
        "checkpoint_id": snapshot.checkpoint_id,
        "session_id": snapshot.session_id,
        "saved_at": snapshot.saved_at,
        "label": snapshot.label,
        "metadata": snapshot.metadata,
        "state": state,
        "stripped_fields": list(snapshot.stripped_fields),
    }


def _flat(value: object) -> bool:
    """Whether ``value`` is a dict of plain scalars only, and no stripped marker: what
    ``strip_live`` copies as it is and finds nothing in."""
    return (
        type(value) is dict
        and STRIPPED_KEY not in value
        and _PLAIN_SCALARS.issuperset(map(type, value.values()))
    )


def encoded_messages(snapshot: Snapshot) -> EncodedMessages | None:
    """The ready encodings of ``snapshot``'s messages, if it has them and they still apply."""
    encoded = snapshot._encoded
    if encoded is None:
        return None
    if _unmade_state(snapshot) is not None:  # its messages are these, by construction
        return encoded
    return encoded if encoded.of(snapshot.state) else None


def checked_messages(snapshot: Snapshot) -> list[dict[str, Any]] | None:
    """``snapshot``'s messages if a store vouched for them (``mark_checked``), else ``None``.

    Vouched messages are ``Message.to_dict`` of valid messages, as a session wrote
    them, read back intact: a resume need not check them again (``actors._restored``).
    """
    vouched = _vouched(snapshot)
    return None if vouched is None else vouched[0]


def checked_encoding(snapshot: Snapshot) -> bytes | None:
    """The encodings of ``snapshot``'s vouched-for messages back to back, as the store read
    them, if it kept them (``mark_checked``): a resumed session's first snapshot cuts
    them instead of encoding its history again. ``None`` when not vouched for."""
    vouched = _vouched(snapshot)
    return None if vouched is None else vouched[1]


def _vouched(snapshot: Snapshot) -> tuple[list[dict[str, Any]], bytes | None] | None:
    """``snapshot._checked`` while its state still holds the list vouched for, else ``None``."""
    checked = snapshot._checked
    if checked is None or snapshot.state.get("messages") is not checked[0]:
        return None
    return checked


def mark_checked(snapshot: Snapshot, encoding: bytes | None = None) -> None:
    """Vouch for ``snapshot``'s messages (see ``checked_messages``), whose encodings back to
    back are ``encoding`` if given. For a store's ``load`` only, of messages it wrote from
    a session's own encodings (``encoded_messages``) and checked back byte for byte, with
    no migration run on them since."""
    object.__setattr__(snapshot, "_checked", (snapshot.state.get("messages"), encoding))


def _encode_reusing(plain: dict[str, Any], encoded: EncodedMessages) -> bytes:
    """``encode_plain(plain)``, reusing ``encoded`` for ``plain["state"]["messages"]``.

    A map's encoding is its header, then each key's and value's encoding in
    order, so encoding the pieces separately gives the same bytes. The pieces
    around the messages are encoded in four runs (``_run``), not one call each,
    and their keys checked in one walk over all four: every ``packb`` call and
    every walk costs far more than the few bytes it looks at.

    Raises:
        SnapshotEncodeError: a piece is not plain (the path may differ from the
            full walk's: the caller encodes everything again to name it).
    """
    pieces: list[bytes | memoryview] = [map_header(len(plain))]
    runs: list[list[Any]] = []
    run: list[Any] = []
    for key, value in plain.items():
        run.append(key)
        if key != "state":
            run.append(value)
            continue
        pieces.append(_run(run, runs))
        pieces.append(map_header(len(value)))
        run = []
        for part, item in value.items():
            run.append(part)
            if part == "messages":
                pieces.append(_run(run, runs))
                pieces.append(array_header(encoded.count))
                pieces.extend(islice(encoded.parts, encoded.count))
                run = []
            else:
                run.append(item)
        pieces.append(_run(run, runs))
        run = []
    pieces.append(_run(run, runs))
    check_keys(runs, root="state")
    return b"".join(pieces)


def _run(items: list[Any], runs: list[list[Any]]) -> bytes | memoryview:
    """The encodings of ``items`` one after the other: one array encoded in one call, less its
    header (an array's encoding is its header, then each item's encoding). Their keys are
    not checked: ``items`` joins ``runs``, whose keys the caller checks in one walk."""
    if not items:
        return b""
    runs.append(items)
    packed = pack_plain(items, root="state")
    return memoryview(packed)[len(array_header(len(items))) :]


def _json_default(obj: object) -> object:
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, bytes | bytearray | memoryview):
        return {"__bytes__": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, tuple):  # pragma: no cover - json encodes tuples natively
        return list(obj)
    raise TypeError(type(obj).__name__)  # pragma: no cover - check_plain ran first


for _cls in (Snapshot,):
    _cls.__module__ = "actors"
