"""The seam between ``AgentHost`` and what runs its sessions.

A *runtime* starts incarnations of sessions and carries calls to them. Two
implement it: ``ThreadRuntime`` (each session an actor on a thread of this
process) and ``supervisor.workers.WorkerRuntime`` (each session an actor in a
worker process, represented here by a proxy actor). ``AgentHost`` picks one in
its constructor and never asks which it has: everything it does (registry,
supervision, checkpoints, hibernation, retries) is the same for both.

What a runtime promises:

- ``start`` runs on the host supervisor's thread and returns the ref of a
  ``SupervisedActor`` whose death is the session's death (the registry evicts
  it, the supervisor restarts it).
- ``call`` carries a ``Send``, ``GetHistory`` or ``TakeSnapshot`` to a running
  incarnation from the calling thread and maps every way it can fail to one of
  four outcomes: the answer; ``NotDelivered`` (nothing ran: retry on the next
  incarnation); ``SessionCrashed`` (it died during the call, which is not
  acknowledged); the call's own exception (the session lives on).
- ``submit`` is ``call`` without a waiting thread: the same four outcomes go
  to a callback, once, on whichever thread completes the call (the session's
  own in thread mode, the one reading the worker's pipe in process mode, or
  the host's timer thread at the deadline). It never blocks on the session.
- A checkpoint an incarnation takes after a turn goes to the launch's ``save``
  before the answer is handed to the caller and before that incarnation's
  death is reported, so a restart never loads a checkpoint older than an
  answer a caller received.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pykka

from actors import (
    AgentTemplate,
    Credentials,
    EventBuffer,
    GetHistory,
    Model,
    Send,
    Snapshot,
    SteeringQueue,
    TakeSnapshot,
)

if TYPE_CHECKING:
    from supervisor._timer import CallTimer

__all__ = ["Done", "NotDelivered", "Request", "SessionLaunch", "SessionRuntime", "WorkerInfo"]

Request = Send | GetHistory | TakeSnapshot
"""What the host asks of a running session."""

Done = Callable[[Any, BaseException | None], None]
"""Gets a submitted call's outcome once: ``(answer, None)`` or ``(None, error)``, the error
being one of those ``SessionRuntime.call`` raises. It must not block or raise."""


class NotDelivered(Exception):
    """A call never reached a live incarnation of its session: nothing ran, so it is safe
    to send it again once the session has been restarted (the host does, once).

    Raised by both runtimes: the incarnation was killed or stopped before it took
    the call, or its worker no longer hosts it. Distinct from ``SessionCrashed``,
    where the session died *during* the call and its effects are unknown.
    """


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live worker process of an ``AgentHost(workers=N)``, as ``AgentHost.workers`` saw it.
    Immutable and thread-safe (a reading: the worker may have died since).

    Attributes:
        pid: The worker's process id.
        sessions: Ids of the sessions placed on it, sorted: every session whose
            current incarnation runs there or is being started there.
    """

    pid: int
    sessions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SessionLaunch:
    """Everything a runtime needs to start one incarnation of a session.

    Attributes:
        session_id: The session's id.
        template: Its agent template (tools, instructions, plugins).
        model: The live model, resolved by the host from the template.
        snapshot: The checkpoint to resume from, or ``None`` for a fresh start.
        max_steps: Most model calls in one turn.
        checkpoint_every: Turns between automatic checkpoints; ``None`` for none.
        metadata: The session's metadata (its tenant).
        steering: The host's steering queue of the session (outlives incarnations).
        events: The host's event stream of the session (outlives incarnations).
        save: The host's checkpoint writer for this session.
        save_later: The same, not waiting for the commit (``Checkpoints.later_saver``):
            the checkpointer of a session on a thread of this process, which need not wait
            on its thread (``actors._later``). ``None``: ``save``.
        timeout: Seconds the start may take.
        credentials: The tenant's credentials, resolved for this incarnation; never
            persisted (in process mode they travel with the ``start`` frame only).
        epoch: The host's ownership epoch of the session (0 outside a cluster), for
            the session's ``current_step()`` key.
    """

    session_id: str
    template: AgentTemplate
    model: Model
    snapshot: Snapshot | None
    max_steps: int
    checkpoint_every: int | None
    metadata: dict[str, Any]
    steering: SteeringQueue
    events: EventBuffer
    save: Callable[[Snapshot], object]
    timeout: float
    credentials: Credentials | None = None
    epoch: int = 0
    save_later: Callable[[Snapshot], object] | None = None


class SessionRuntime(Protocol):
    """What runs sessions for an ``AgentHost``; see the module docstring. Thread-safe."""

    def start(self, launch: SessionLaunch) -> pykka.ActorRef[Any]:
        """Start an incarnation and run its plugins' ``session_start``; its actor's ref.

        Raises:
            PluginError: a ``session_start`` hook raised.
            TemplateNotPicklable, TemplateNotLoadable, WorkerCrashed, WorkerStartError:
                worker runtime only.
        """
        ...

    def call(
        self, session_id: str, ref: pykka.ActorRef[Any], request: Request, timeout: float
    ) -> Any:
        """Carry ``request`` to the incarnation ``ref`` and return its answer.

        Raises:
            NotDelivered: the incarnation is gone or going; nothing ran.
            SessionCrashed: it died during the call (its actor's end is reported by then).
            TimeoutError: no answer within ``timeout`` (the call may still complete).
            Exception: what the call raised in the session, which lives on.
        """
        ...

    def submit(  # noqa: PLR0917 (one call's whole description)
        self,
        session_id: str,
        ref: pykka.ActorRef[Any],
        request: Request,
        timeout: float,
        done: Done,
        timer: CallTimer,
    ) -> None:
        """Start ``request`` on the incarnation ``ref`` and return at once: ``done`` gets its
        outcome (what ``call`` would return or raise), with the deadline kept on ``timer``.

        Raises:
            RuntimeError: ``timer`` is closed (the host is shut down).
        """
        ...

    def workers(self) -> list[WorkerInfo]:
        """The live worker processes (``[]`` when sessions run in threads)."""
        ...

    def wait_ready(self, timeout: float | None) -> bool:
        """Whether every worker serves, waiting up to ``timeout`` (see ``AgentHost``)."""
        ...

    @property
    def deaths(self) -> int:
        """Worker processes that died, shutdown excepted."""
        ...

    @property
    def gave_up(self) -> bool:
        """Whether dead workers are no longer replaced."""
        ...

    def close(self) -> None:
        """Release what the runtime holds (after the host stopped every session)."""
        ...


NotDelivered.__module__ = "supervisor"
WorkerInfo.__module__ = "supervisor"
