"""Tool-call ids kept unique within a session's history, where a model's answer enters it.

Providers pair a tool's result with its call by id, and Anthropic's API refuses a
conversation holding two ``tool_use`` blocks of one id (HTTP 400 on every later
request of the session). Models and servers repeat ids all the same: within one answer
(a server giving every call the same id), or across turns (a Chat Completions server
without ids, whose calls get ``call_<index>`` on every answer). So a call whose id the
history already holds, or an earlier call of the same answer, gets a new one:
``<id>_2``, ``<id>_3``, ... (the first free); an empty id gets ``call_1``, ``call_2``, ...
Deterministic (the same history and answer give the same ids), and made of the
original and ``[0-9_]``, so an id every provider took stays one they take.

The session's tool message answers the call under its new id; nothing else changes
(a provider holding the answer under its own ids, as the Responses API does with
``previous_response_id``, sees a history that differs from what it holds, and is sent
the whole conversation).
"""

from __future__ import annotations

from collections.abc import Iterable

from actors.messages import Message, ToolCall

__all__ = ["CallIds"]


class CallIds:
    """The tool-call ids in one session's history. Used on the session's thread only.

    Built from the history when first needed (a resumed session's included), kept up to
    date as answers are recorded, and forgotten when the history is cut back (a rolled-back
    turn), to be built again from what remains.
    """

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: set[str] | None = None

    def forget(self) -> None:
        """The history was cut back: its ids are read again when next needed."""
        self._ids = None

    def unique(self, message: Message, history: Iterable[Message]) -> Message:
        """``message`` (an answer about to join ``history``) with every call id that is
        empty, in ``history`` or repeated within it replaced (see the module docstring);
        itself when none is. Its ids count as in use from now on."""
        if not message.tool_calls:
            return message
        ids = self._ids
        if ids is None:
            ids = self._ids = {call.id for m in history for call in m.tool_calls}
        calls = tuple(self._claim(call, ids) for call in message.tool_calls)
        if all(a is b for a, b in zip(calls, message.tool_calls, strict=True)):
            return message
        return Message(message.role, message.content, calls, message.tool_call_id, message.name)

    @staticmethod
    def _claim(call: ToolCall, ids: set[str]) -> ToolCall:
        """``call``, or a copy under a free id; that id is added to ``ids``."""
        if call.id and call.id not in ids:
            ids.add(call.id)
            return call
        base, number = (call.id, 2) if call.id else ("call", 1)
        while f"{base}_{number}" in ids:
            number += 1
        fresh = f"{base}_{number}"
        ids.add(fresh)
        return ToolCall(fresh, call.name, call.arguments)
