"""What an ``AgentHost`` remembers about each session, live or hibernated.

A record outlives the session's actor: it carries the template, the
registration metadata, the event buffer and the steering queue across crash
restarts and hibernation, so callers keep one event stream and one steering
queue per session whatever happens to the actor underneath.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import pykka

from actors import (
    AgentTemplate,
    Event,
    EventBuffer,
    InvalidMessage,
    Snapshot,
    SnapshotDecodeError,
    SteeringQueue,
    Usage,
)
from supervisor._checkpoints import SaveOrder, event_seq
from supervisor._gate import SessionGate

__all__ = ["SessionInfo", "SessionRecord", "SessionStatus"]

SessionStatus = Literal["starting", "active", "restarting", "hibernated", "failed", "stopped"]
"""Where a session is in its life on a host:

- ``starting``: being started or resumed for the first time;
- ``active``: an actor is running it;
- ``restarting``: its actor died and the supervisor is resuming it from its last checkpoint;
- ``hibernated``: checkpointed and its actor stopped; the next ``send`` reactivates it;
- ``failed``: given up after too many crashes (``resume`` brings it back);
- ``stopped``: stopped on purpose; the host forgets it.
"""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One row of ``AgentHost.list_sessions()``. Thread-safe (immutable).

    Attributes:
        session_id: The session's id.
        tenant_id: Its tenant.
        status: See ``SessionStatus``.
        model: The model string of its template.
        created_at: When the host first registered it, ms since the Unix epoch.
        usage: Tokens its model calls used, as its ``AgentSession.usage()`` counts
            them (failed turns included; after a crash, from the checkpoint it was
            resumed from), summed from its ``model_response`` events: no snapshot
            is loaded to list it.
    """

    session_id: str
    tenant_id: str
    status: SessionStatus
    model: str
    created_at: int
    usage: Usage = field(default_factory=Usage)


class SessionRecord:
    """The host's mutable record of one session.

    Thread-safety: ``op_lock`` (a ``SessionGate``: FIFO, for blocking callers and
    non-blocking calls alike) serializes the operations that change what runs
    the session (send, hibernate, stop); ``status`` and ``ref`` change only
    under the host's ``changed`` condition. Kept small (slots, the template
    and attribute dict shared by reference) because a host may hold many
    thousands of hibernated sessions.
    """

    __slots__ = (
        "attrs",
        "created_at",
        "events",
        "failure",
        "fingerprint",
        "hibernate_after",
        "incarnations",
        "last_active",
        "op_lock",
        "ref",
        "resume_from",
        "save_order",
        "session_id",
        "status",
        "steering",
        "template",
        "tenant_id",
        "usage",
    )

    def __init__(
        self,
        session_id: str,
        template: AgentTemplate,
        *,
        tenant_id: str,
        fingerprint: str | None,
        attrs: dict[str, Any],
        created_at: int,
        hibernate_after: float | None,
        resume_from: Snapshot | None = None,
        save_order: SaveOrder | None = None,
    ) -> None:
        self.session_id = session_id
        self.template = template
        self.tenant_id = tenant_id
        self.fingerprint = fingerprint
        self.attrs = attrs
        self.created_at = created_at
        self.hibernate_after = hibernate_after
        self.resume_from = resume_from
        self.status: SessionStatus = "starting"
        self.ref: pykka.ActorRef[Any] | None = None
        self.incarnations = 0
        self.failure: str | None = None  # the last crash, once given up
        self.last_active = 0.0
        self.op_lock = SessionGate()
        # Every save of its checkpoints goes through it; shared with the other records of
        # its id a caller may still hold (see SessionTable.create).
        self.save_order = SaveOrder() if save_order is None else save_order
        # A resumed session's stream goes on after the events its checkpoint had seen.
        after = 0 if resume_from is None else event_seq(resume_from)
        self.events = EventBuffer(attrs.get("event_buffer_size") or 1000, after=after)
        self.steering = SteeringQueue(attrs.get("max_steering_queue") or 16)
        self.usage = Usage()
        self.restart_usage(resume_from)
        self.events.subscribe(self._count_usage, quick=True)

    def restart_usage(self, snapshot: Snapshot | None) -> None:
        """Count usage on from ``snapshot``'s (an incarnation starts from it), or from 0."""
        try:
            self.usage = Usage() if snapshot is None else snapshot.usage()
        except SnapshotDecodeError:  # the session will refuse that checkpoint itself
            self.usage = Usage()

    def _count_usage(self, event: Event) -> None:
        """Add a model call's usage (a subscriber, on the thread that publishes the event)."""
        if event.type != "model_response":
            return
        try:  # (not ``contextlib.suppress``: three Python calls more on every model call)
            spent = Usage.from_dict(event.data.get("usage"))
        except InvalidMessage:  # a plugin's event: not a model call's
            return
        self.usage = self.usage + spent

    def exclusive(self, timeout: float) -> _Exclusive:
        """Hold ``op_lock`` for an operation that changes what runs the session:
        ``with record.exclusive(timeout): ...``.

        Raises:
            TimeoutError: (on entering) another operation held it for ``timeout`` seconds.
        """
        return _Exclusive(self, timeout)

    def info(self) -> SessionInfo:
        """An immutable view for listings."""
        return SessionInfo(
            self.session_id,
            self.tenant_id,
            self.status,
            self.template.model_string,
            self.created_at,
            self.usage,
        )


for _cls in (SessionInfo,):
    _cls.__module__ = "supervisor"


class _Exclusive:
    """``SessionRecord.exclusive``'s context manager. A class rather than a generator
    (``contextlib.contextmanager``): it is entered on every ``send``, and costs three
    Python calls instead of six. Used by one thread (the one that created it)."""

    __slots__ = ("_record", "_timeout")

    def __init__(self, record: SessionRecord, timeout: float) -> None:
        self._record = record
        self._timeout = timeout

    def __enter__(self) -> None:
        record = self._record
        if not record.op_lock.acquire(timeout=self._timeout):
            raise TimeoutError(
                f"session {record.session_id!r} stayed busy with another call for {self._timeout} s"
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._record.op_lock.release()
