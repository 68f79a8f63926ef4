"""``PromptView``: the prompt a model reads, without copying the conversation.

A session's history only grows (a failed turn is rolled back by replacing the
list, never by shrinking it in place), so a view of its first ``n`` messages
stays valid for as long as anyone holds it. Building a prompt by copying the
history cost O(history) per model call, which made every turn of a long-lived
session slower than the one before, even with a model that reads only the
newest messages.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain, islice
from typing import overload

from actors.messages import Message

__all__ = ["PromptView"]


class PromptView(Sequence[Message]):
    """An immutable ``Sequence`` of an optional system message then ``messages[:end]``.

    Thread-safe to read (it never changes). Compares equal to a list or tuple
    with the same messages.
    """

    __slots__ = ("_end", "_len", "_messages", "_system")

    def __init__(self, system: Message | None, messages: list[Message]) -> None:
        self._system = system
        self._messages = messages
        self._end = len(messages)
        # Stored, not computed: models index the prompt several times per call,
        # and ``len(self)`` inside a method costs a Python-level call each time.
        self._len = self._end + (system is not None)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return list(self)[index] if index.step not in (None, 1) else self._slice(index)
        size = self._len
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("prompt index out of range")
        if self._system is not None:
            if index == 0:
                return self._system
            index -= 1
        return self._messages[index]

    def _slice(self, index: slice) -> list[Message]:
        start, stop, _ = index.indices(self._len)
        if start >= stop:
            return []
        if self._system is None:
            return self._messages[start:stop]
        head = [self._system] if start == 0 else []
        return head + self._messages[max(start - 1, 0) : stop - 1]

    def __iter__(self) -> Iterator[Message]:
        rest = islice(self._messages, self._end)
        return rest if self._system is None else chain((self._system,), rest)

    def __reversed__(self) -> Iterator[Message]:
        messages, system = self._messages, self._system
        for index in range(self._end - 1, -1, -1):
            yield messages[index]
        if system is not None:
            yield system

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PromptView | list | tuple):
            return self._len == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which do not hash

    def __repr__(self) -> str:
        return f"PromptView({list(self)!r})"
