"""A resumed session's history: checked at once, built into ``Message`` objects when first read.

A resume rebuilt every message of the checkpoint (``Message.from_dict``) before
the session could answer: for a 300-message session that was most of the
resume. ``RestoredMessages`` splits that work:

* **At resume** (the session's constructor): one check of the whole list, a
  few C-level passes (``set(map(type, ...))``, one key union) instead of a
  Python call per field, accepts exactly what ``Message.from_dict``'s exact
  path accepts. Anything else (an unusual type, a wrong field) takes
  ``Message.from_dict`` message by message, as before, which builds the
  messages or raises ``InvalidMessage`` naming the field: a bad checkpoint
  still fails the resume, with the same error.
* **On first read** (``messages``, on the session's thread): the checked
  dicts become ``Message`` objects without being checked again.
* **Not at all, when vouched for** (``checked``): the messages a store read
  back from a session's own encodings, byte for byte (``actors.snapshot.checked_messages``),
  are ``Message.to_dict`` of valid messages, so they are neither checked nor
  found canonical again: a resume does not redo what the turns that appended
  them did.
* **Never, for a snapshot**: when the dicts are what ``Message.to_dict``
  writes (same keys, same order), they are what a snapshot of those messages
  holds, so the session's first snapshot hands them to its ``HistoryCodec``
  (``canonical``, checked then, not while the resume waits): no checkpoint
  converts them again, and one taken before the history was read (a
  hibernation, a stop) builds no message at all.

The dicts are shared with the snapshot they came from and with later
snapshots; nothing here mutates them.
"""

from __future__ import annotations

import functools
import operator
from itertools import chain, repeat
from typing import Any

from actors.messages import _CALL_KEYS, _MESSAGE_KEYS, _ROLES, Message, checked_message

__all__ = ["RestoredMessages"]

_NONE = type(None)
_TEXT_OR_NONE = frozenset((str, _NONE))
_JSON_SCALARS = frozenset((str, int, float, bool, _NONE))
_JSON_CONTAINERS = frozenset((dict, list))
_CALL_ORDER = ("id", "name", "arguments")
_OPTIONAL = ("tool_calls", "tool_call_id", "name")
# Every key order ``Message.to_dict`` writes: role, content, then the optionals present.
_CANONICAL_ORDERS = frozenset(
    ("role", "content", *(key for bit, key in enumerate(_OPTIONAL) if mask >> bit & 1))
    for mask in range(1 << len(_OPTIONAL))
)
_MAX_DEPTH = 100
_MESSAGE_VALUE_TYPES = frozenset((str, _NONE, list))
_get = dict.get
_ABSENT = object()
_is_present = functools.partial(operator.is_not, _ABSENT)
_flat = chain.from_iterable


class RestoredMessages:
    """The messages of a checkpoint a session resumes from (see the module docstring).

    Not thread-safe: made and read on one session's thread (its constructor's
    caller, then its own), one at a time.

    Args:
        raw: ``state["messages"]`` of the checkpoint: a list of message dicts.
        checked: ``raw`` is vouched for (see the module docstring): taken unchecked.
        encoding: With ``checked``, the encodings of ``raw``'s messages back to back, as
            the store read them (see ``encoding``); ignored without.

    Raises:
        InvalidMessage: a message is malformed (the field named, as ``Message.from_dict``).
        TypeError: ``raw`` is not iterable.
    """

    __slots__ = ("_built", "_canonical", "_raw", "encoding")

    def __init__(
        self, raw: object, *, checked: bool = False, encoding: bytes | None = None
    ) -> None:
        self._raw: list[dict[str, Any]] = []
        self._built: list[Message] | None = None
        self._canonical: bool | None = None
        self.encoding: bytes | None = None
        """The messages' encodings back to back, when vouched for with them: what
        ``HistoryCodec.seed`` cuts instead of encoding the dicts again."""
        if type(raw) is list and checked:
            self._raw = raw
            self._canonical = bool(raw)
            self.encoding = encoding
        elif type(raw) is list and _exact(raw):
            self._raw = raw
        else:  # the general path names what is wrong
            self._built = [Message.from_dict(item) for item in raw]  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self._raw) if self._built is None else len(self._built)

    @property
    def built(self) -> bool:
        """Whether ``messages`` has built the ``Message`` objects (or the check did)."""
        return self._built is not None

    @property
    def canonical(self) -> bool:
        """Whether the dicts are exactly what ``Message.to_dict`` writes for the messages
        they build, so a snapshot may hold them as they are (see ``plain``). Found out on
        the first call (a snapshot's, not the resume's) and kept."""
        if self._canonical is None:
            self._canonical = bool(self._raw) and _canonical(self._raw)
        return self._canonical

    @property
    def plain(self) -> list[dict[str, Any]]:
        """The checked dicts, as the checkpoint held them; what ``to_dict`` gives when
        ``canonical``. Read-only: they are shared with snapshots."""
        return self._raw

    def messages(self) -> list[Message]:
        """The messages, built on the first call; the same list every time."""
        if self._built is None:
            self._built = list(map(checked_message, self._raw))
        return self._built


def _exact(raw: list[Any]) -> bool:
    """Whether ``Message.from_dict``'s exact path accepts every entry of ``raw``: dicts
    of known keys, a known ``str`` role, ``str``-or-``None`` texts, tool calls as lists
    of dicts with ``str`` id and name and JSON-object arguments, every type exact.

    A few passes over the whole list, each a C loop; the values of every message are
    typed in one pass, and the only lists among them must be the ``tool_calls``.
    """
    if not raw:
        return True
    if set(map(type, raw)) != {dict}:
        return False
    if not set().union(*raw) <= _MESSAGE_KEYS:
        return False
    kinds = list(map(type, _flat(map(dict.values, raw))))
    if not set(kinds) <= _MESSAGE_VALUE_TYPES:
        return False
    lists = _tool_call_lists(raw)
    if kinds.count(list) != len(lists):  # a list that is not ``tool_calls``
        return False
    if set(map(type, lists)) - {list}:  # ``tool_calls`` of another type
        return False
    # Every other value is now an exact ``str`` or ``None`` (hashable): the roles need no
    # pass of their own over their types. A missing role is ``None``, not a role.
    if not set(map(_get, raw, repeat("role"))) <= _ROLES:
        return False
    calls = list(_flat(lists))
    if not calls:
        return True
    if set(map(type, calls)) != {dict}:
        return False
    if not set().union(*calls) <= _CALL_KEYS:
        return False
    for key in ("id", "name"):
        if set(map(type, map(_get, calls, repeat(key)))) != {str}:
            return False
    arguments = list(map(_get, calls, repeat("arguments"), repeat({})))
    return set(map(type, arguments)) == {dict} and _json_objects(arguments)


def _tool_call_lists(raw: list[dict[str, Any]]) -> list[Any]:
    """The value of every ``tool_calls`` key of ``raw``, in order, whatever it is."""
    return list(filter(_is_present, map(_get, raw, repeat("tool_calls"), repeat(_ABSENT))))


def _json_objects(dicts: list[dict[Any, Any]]) -> bool:
    """Whether every dict of ``dicts`` holds only JSON values under ``str`` keys, every
    type exact (what ``_is_json`` accepts, less its ``Mapping``/``tuple``/subclass cases,
    which go to the general path). One level at a time, the loops in C; deeper than
    ``_MAX_DEPTH`` (or a cycle, in a state not read from disk) is left to the general path."""
    level: list[Any] = list(dicts)
    for _ in range(_MAX_DEPTH):
        if not level:
            return True
        mappings = [node for node in level if type(node) is dict]
        if mappings and not set(map(type, _flat(mappings))) <= {str}:
            return False
        values = list(_flat(map(dict.values, mappings)))
        values += _flat([node for node in level if type(node) is list])
        types = set(map(type, values))
        if not types <= _JSON_SCALARS | _JSON_CONTAINERS:
            return False
        level = [value for value in values if type(value) in _JSON_CONTAINERS]
    return False


def _canonical(raw: list[dict[str, Any]]) -> bool:
    """Whether each dict of ``raw`` (exact, see ``_exact``) is ``to_dict`` of the message it
    builds: its keys in ``to_dict``'s order, no empty ``tool_calls``, no ``None`` id or
    name written out, and every call's keys ``id``, ``name``, ``arguments`` in order."""
    if not set(map(tuple, raw)) <= _CANONICAL_ORDERS:
        return False
    for key in ("tool_call_id", "name"):
        if None in map(_get, raw, repeat(key), repeat("")):
            return False
    lists = _tool_call_lists(raw)
    if [] in lists:
        return False
    return set(map(tuple, _flat(lists))) <= {_CALL_ORDER}
