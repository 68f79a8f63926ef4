"""``OwnTurn``: which events of a session's stream belong to one streamed send, so that
the send forwards its own turn's events and no other's.

A session runs its turns one at a time and brackets each turn's events between
``turn_started`` and ``turn_finished`` (or an ``error`` naming the turn; or
``crashed``, when the session died during it). A streamed send is submitted with
a tag of its own (``AgentHost.send(tag=...)``), which its turn's ``turn_started``
carries: from that event to the turn's last one, the events are the send's. Turns
queued before it or after it (a JSON send, a library call on the same host,
another streamed send, of the same text or not) carry another tag or none, so
they are never taken for it; the next ``turn_started`` ends its turn in any case.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from actors import Event

__all__ = ["OwnTurn", "ends_turn"]


def ends_turn(event: Event) -> bool:
    """Whether ``event`` is the last event of a turn: it finished, failed, or the session
    died during it (``crashed``: the turn never finishes, and the next turn, of the session
    restarted, is another send's)."""
    return event.type in {"turn_finished", "crashed"} or (
        event.type == "error" and "turn" in event.data
    )


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
    _before: int = field(default=0, repr=False)  # lost before its turn_started was seen
    # Handed out, and left out, while its turn_started may have been lost already.
    _passed: int = field(default=0, repr=False)
    # Whether the next event handed out may be its turn's though its turn_started was not
    # seen: since a loss, until a turn's end or another turn's start is seen.
    _doubt: bool = field(default=False, repr=False)

    def missed(self, count: int) -> int:
        """The stream lost ``count`` events (dropped from the session's full buffer)
        right before the next event it hands out: how many of them to report now, before
        that event. Those lost inside this send's turn, at once; those lost before its
        ``turn_started`` was seen are held back (``untold``): they were another turn's
        unless its ``turn_started`` was among them. Call it before ``owns`` of that event.
        """
        if count <= 0 or self.finished:
            return 0
        if self.started_seq is None:
            self._before += count
            self._doubt = True
            return 0
        return count

    def unseen(self) -> int:
        """Events lost that may have been this send's turn's, not reported yet: all those
        lost before its ``turn_started`` if it was never seen (lost itself), else none."""
        return self._before if self.started_seq is None else 0

    def untold(self) -> int:
        """How many events to report missed once the stream is done (before the answer):
        if its ``turn_started`` was never seen (lost itself), the events lost (``unseen``)
        and those handed out after a loss that ``owns`` left out though they may have
        been its turn's (it cannot tell: their ``turn_started`` is gone); else none.

        The client got none of its turn's events then, and this is never fewer than
        their number: an upper bound, which counts the events of turns queued before it
        that were lost too. It counts no event handed out after another turn's
        ``turn_started``, or after a turn's last event (``ends_turn``), until the next
        loss: the session runs its turns one at a time, so those were not its turn's.
        """
        return self._before + self._passed if self.started_seq is None else 0

    def owns(self, event: Event) -> bool:
        """Whether ``event`` belongs to this send's turn. Call it for every event of the
        session's stream after the send was submitted, in order."""
        if self.finished:
            return False
        mine = event.type == "turn_started" and event.data.get("tag") == self.tag
        if self.started_seq is None:
            if not mine:
                self._pass_over(event)
                return False
            self.started_seq = event.seq
        elif event.type == "turn_started":  # another turn: this one ended unseen
            self.finished = True
            return False
        if ends_turn(event):
            self.finished = True
        return True

    def _pass_over(self, event: Event) -> None:
        """Count ``event``, left out before its ``turn_started`` was seen, if it may be
        this send's turn's all the same (see ``untold``)."""
        if event.type == "turn_started":  # another turn's: those after it are not its own
            self._doubt = False
        elif self._doubt:
            self._passed += 1
            self._doubt = not ends_turn(event)  # next: between turns, or another's start
