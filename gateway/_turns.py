"""``TurnOwners``: which of the gateway's sends a session's turn belongs to, so that a
streamed send forwards its own turn's events and no other's.

A session runs its turns one at a time, in the order its sends arrived, and
brackets each turn's events between ``turn_started`` (which carries the turn's
text) and ``turn_finished`` (or an ``error`` naming the turn). What the event
stream does not carry is which send a turn serves. The gateway submits its
streamed sends of a session from its one event loop, so it knows their order:
the first ``turn_started`` whose text is a pending streamed send's text belongs
to the earliest such send not yet matched. Two streamed sends of the same text
to the same session are thus matched in the order they were submitted, which
is the order they run.

The match is by ``turn_started``'s ``seq`` (unique in a session's stream), not
by its turn number: a failed turn is rolled back and the next one reuses its
number. A turn of the same text as a pending streamed send, queued before it
by another route (a JSON send, a library call on the same host, or a streamed
send whose client left before its turn began) can still be taken for it: then
that stream shows the other turn's events, and its answer is still its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors import Event

__all__ = ["PendingSend", "TurnOwners"]


@dataclass(eq=False, slots=True)
class PendingSend:
    """One send the gateway submitted and has not finished answering.

    Attributes:
        text: The message text (what its ``turn_started`` carries).
        started_seq: The ``seq`` of its ``turn_started``, once matched.
        finished: Whether its turn's last event (``turn_finished`` or ``error``) was seen.
    """

    text: str
    started_seq: int | None = None
    finished: bool = False


def ends_turn(event: Event) -> bool:
    """Whether ``event`` is the last event of a turn."""
    return event.type == "turn_finished" or (event.type == "error" and "turn" in event.data)


class TurnOwners:
    """The pending sends of each session, in submission order. Not thread-safe: used on
    the server's event loop only (every route runs there)."""

    def __init__(self) -> None:
        self._pending: dict[str, list[PendingSend]] = {}

    def submit(self, session_id: str, text: str) -> PendingSend:
        """Record a send to ``session_id`` (the host's id), just before it is submitted."""
        send = PendingSend(text)
        self._pending.setdefault(session_id, []).append(send)
        return send

    def done(self, session_id: str, send: PendingSend) -> None:
        """Forget ``send`` (answered, failed, or its client left)."""
        sends = self._pending.get(session_id)
        if sends is None:
            return
        if send in sends:
            sends.remove(send)
        if not sends:
            del self._pending[session_id]

    def owns(self, session_id: str, send: PendingSend, event: Event) -> bool:
        """Whether ``event`` of ``session_id`` belongs to ``send``'s turn. Call it for every
        event of the session's stream after ``send`` was submitted, in order."""
        if send.finished:
            return False
        if send.started_seq is None:
            if event.type != "turn_started":
                return False
            self._match(session_id, event)
            if send.started_seq != event.seq:
                return False
        elif event.seq < send.started_seq:
            return False
        if ends_turn(event):
            send.finished = True
        return True

    def _match(self, session_id: str, started: Event) -> None:
        sends = self._pending.get(session_id, [])
        if any(s.started_seq == started.seq for s in sends):
            return
        text = started.data.get("text")
        for candidate in sends:
            if candidate.started_seq is None and candidate.text == text:
                candidate.started_seq = started.seq
                return
