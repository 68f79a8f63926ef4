"""The messages a session's actor takes besides its proxy calls: ``Send``, ``TakeSnapshot``,
``GetHistory`` (public, for hosts that ask a session's ``ActorRef`` directly) and
``StartCheck`` (``AgentSession.start``'s own)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GetHistory", "Send", "StartCheck", "TakeSnapshot"]


class StartCheck:
    """Asked by ``AgentSession.start`` to learn whether ``session_start`` succeeded."""


@dataclass(frozen=True, slots=True)
class Send:
    """Message form of ``AgentSession.send``: ``ref.ask(Send(text))`` runs one turn.

    Same behaviour as the proxy call without the proxy's per-call cost, for
    hosts that drive many turns. ``tag``, when given, is an opaque label of the
    caller's choosing that the turn's ``turn_started`` event carries (as
    ``tag``), so a follower of the session's events can tell which send a turn
    serves (a gateway streaming one send's events among others' does). Neither field
    is checked here (a message costs nothing to build): ``send`` checks both before the
    turn starts, and the ask raises its ``TypeError`` or ``ValueError``.

    Immutable and thread-safe.
    """

    text: str
    tag: str | None = None


@dataclass(frozen=True, slots=True)
class TakeSnapshot:
    """Message form of ``AgentSession.snapshot``: ``ref.ask(TakeSnapshot(label))``.

    Immutable and thread-safe.
    """

    label: str | None = None


@dataclass(frozen=True, slots=True)
class GetHistory:
    """Message form of ``AgentSession.history``: ``ref.ask(GetHistory())``.

    Immutable and thread-safe.
    """


for _cls in (GetHistory, Send, TakeSnapshot):
    _cls.__module__ = "actors"
