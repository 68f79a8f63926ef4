"""``OwnTurn``: which events of a session's stream belong to one streamed send, so that
the send forwards its own turn's events and no other's.

A session runs its turns one at a time and brackets each turn's events between
``turn_started`` and ``turn_finished`` (or an ``error`` naming the turn). A
streamed send is submitted with a tag of its own (``AgentHost.send(tag=...)``),
which its turn's ``turn_started`` carries: from that event to the turn's last
one, the events are the send's. Turns queued before it (a JSON send, a library
call on the same host, another streamed send, of the same text or not) carry
another tag or none, so they are never taken for it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from actors import Event

__all__ = ["OwnTurn", "ends_turn"]


def ends_turn(event: Event) -> bool:
    """Whether ``event`` is the last event of a turn."""
    return event.type == "turn_finished" or (event.type == "error" and "turn" in event.data)


@dataclass(eq=False, slots=True)
class OwnTurn:
    """One streamed send's view of its session's events. Not thread-safe: one stream
    uses it, on the server's event loop.

    Attributes:
        tag: The send's tag, unique to it (submit the send with it).
        started_seq: The ``seq`` of its ``turn_started``, once seen.
        finished: Whether its turn's last event was seen.
    """

    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_seq: int | None = None
    finished: bool = False

    def owns(self, event: Event) -> bool:
        """Whether ``event`` belongs to this send's turn. Call it for every event of the
        session's stream after the send was submitted, in order."""
        if self.finished:
            return False
        if self.started_seq is None:
            if event.type != "turn_started" or event.data.get("tag") != self.tag:
                return False
            self.started_seq = event.seq
        if ends_turn(event):
            self.finished = True
        return True
