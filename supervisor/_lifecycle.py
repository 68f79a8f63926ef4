"""The per-actor lifecycle record: its watchers, its exit reason and its one death notice.

Every :class:`~supervisor.SupervisedActor` owns one :class:`Lifecycle`, reachable
from its ``ActorRef`` (see :func:`lifecycle_of`) even after the actor object is
gone. The record is only touched on rare paths (adding or removing a watcher, and
the actor's death), so its lock never sits on the per-message path.

Death is delivered in two phases, each in the order the watchers were added:

1. *early* watchers (registries evicting the actor's entries),
2. *ordinary* watchers (supervisors, user callbacks, other actors).

A watcher added while the death notices are being delivered is picked up by the
same delivery loop and receives the real reason; one added after the loop has
finished is told ``noproc`` by :func:`supervisor.monitor`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

import pykka

from supervisor.errors import Killed

__all__ = [
    "NOPROC",
    "NORMAL",
    "SHUTDOWN",
    "Down",
    "ExitReason",
    "Lifecycle",
    "MonitorRef",
    "Notify",
    "attach_lifecycle",
    "deliver",
    "describe_reason",
    "is_abnormal",
    "lifecycle_of",
    "reason_kind",
]

logger = logging.getLogger("supervisor")

NORMAL: Final = "normal"
"""Exit reason: stopped the ordinary way (``stop()``, ``ActorRegistry.stop_all()``)."""

SHUTDOWN: Final = "shutdown"
"""Exit reason: the actor was stopped by its supervisor (or :func:`supervisor.terminate`)."""

NOPROC: Final = "noproc"
"""Exit reason: the actor was already gone when the monitor was set up; the real reason is lost."""

ExitReason: TypeAlias = Literal["normal", "shutdown", "noproc"] | BaseException
"""Why an actor exited: one of the three strings above, or the exception that killed it."""

_LIFECYCLE_ATTR: Final = "_sessionvisor_lifecycle"

_RUNNING: Final = 0
_DYING: Final = 1
_DEAD: Final = 2


def is_abnormal(reason: ExitReason) -> bool:
    """Whether ``reason`` is an abnormal exit in the OTP sense (anything but normal or shutdown).

    ``noproc`` counts as abnormal: the actor died before anyone could see why.
    Thread-safe (pure function).
    """
    return not isinstance(reason, str) or reason == NOPROC


def describe_reason(reason: ExitReason) -> str:
    """``reason`` in words, for log lines and event fields (a repr reads poorly there).

    ``killed`` or ``killed: <why>`` for a ``Killed`` (``supervisor.kill``),
    ``<TypeName>: <message>`` for any other exception (the type name alone
    without a message), and a phrase for ``normal``, ``shutdown`` and ``noproc``.
    Thread-safe (pure function).
    """
    if isinstance(reason, Killed):
        return "killed" if reason.reason == "killed" else f"killed: {reason.reason}"
    if isinstance(reason, BaseException):
        message = str(reason)
        return f"{type(reason).__name__}: {message}" if message else type(reason).__name__
    return _REASON_WORDS.get(reason, reason)


def reason_kind(reason: ExitReason) -> str:
    """A short name of ``reason``'s kind, from a small set (a metrics label, an event field):
    ``killed``, the exception's type name, or ``normal``, ``shutdown``, ``noproc``.
    Thread-safe (pure function)."""
    if isinstance(reason, Killed):
        return "killed"
    if isinstance(reason, BaseException):
        return type(reason).__name__
    return str(reason)


_REASON_WORDS: Final[dict[str, str]] = {
    NORMAL: "stopped normally",
    SHUTDOWN: "stopped by its supervisor",
    NOPROC: "noproc: it was gone before anyone watched it, so why is unknown",
}


class MonitorRef:
    """Handle of one monitor, returned by :func:`supervisor.monitor`; pass it to ``demonitor``.

    Compared by identity, hashable. Thread-safe: its public attributes never change.

    Attributes:
        actor_ref: The monitored actor.
        early: Whether this watcher runs in the early (registry) phase.
    """

    __slots__ = ("_active", "_lifecycle", "_notify", "actor_ref", "early")

    def __init__(
        self,
        actor_ref: pykka.ActorRef[Any],
        lifecycle: Lifecycle | None,
        notify: Notify,
        *,
        early: bool,
    ) -> None:
        self.actor_ref = actor_ref
        self.early = early
        self._lifecycle = lifecycle
        self._notify = notify
        # Guarded by the lifecycle's lock: True until delivered or cancelled.
        self._active = lifecycle is not None

    def __repr__(self) -> str:
        phase = "early " if self.early else ""
        return f"<MonitorRef {phase}of {self.actor_ref} at {id(self):#x}>"


@dataclass(frozen=True, slots=True)
class Down:
    """The notice a watcher receives, exactly once, when a monitored actor has exited.

    Match on ``reason``: ``"normal"``, ``"shutdown"``, ``"noproc"`` or an exception
    instance (``case BaseException() as exc:``). Thread-safe (immutable).

    Attributes:
        ref: The monitor this notice belongs to (as returned by ``monitor()``).
        actor_ref: The actor that exited.
        reason: Why it exited.
    """

    ref: MonitorRef
    actor_ref: pykka.ActorRef[Any]
    reason: ExitReason

    @property
    def abnormal(self) -> bool:
        """True unless the reason is ``"normal"`` or ``"shutdown"`` (see :func:`is_abnormal`)."""
        return is_abnormal(self.reason)


Notify: TypeAlias = Callable[[Down], object] | pykka.ActorRef[Any]
"""Where a ``Down`` goes: a callable, or an actor that is told the ``Down`` as a message."""


def deliver(mref: MonitorRef, down: Down) -> None:
    """Hand ``down`` to the watcher of ``mref``; log (never raise) what the watcher raises.

    A watcher that is a dead actor is skipped silently, like a message to a dead
    Erlang process. Runs on the caller's thread.
    """
    notify = mref._notify
    try:
        if isinstance(notify, pykka.ActorRef):
            notify.tell(down)
        else:
            notify(down)
    except pykka.ActorDeadError:
        logger.debug("watcher %s of %s is dead; Down dropped", notify, down.actor_ref)
    except Exception:
        logger.exception("watcher %r raised while handling %r; ignored", notify, down)


class Lifecycle:
    """The watchers and exit reason of one actor. Thread-safe (one lock, rare paths only)."""

    __slots__ = (
        "_early",
        "_lock",
        "_ordinary",
        "_reason",
        "_state",
        "actor",
        "ending",
        "finished",
        "thread",
    )

    def __init__(self) -> None:
        self.thread: int | None = None
        """Ident of the actor's thread, once its loop runs."""
        self.actor: Callable[[], object | None] = lambda: None
        """A weak reference to the actor object (``None`` once it is gone)."""
        self._lock = threading.Lock()
        self._early: dict[MonitorRef, None] = {}
        self._ordinary: dict[MonitorRef, None] = {}
        self._state: int = _RUNNING
        self._reason: ExitReason | None = None
        self.finished = threading.Event()
        """Set once every Down notice of this actor has been handed out."""
        self.ending = False
        """True from the moment ``kill`` or ``terminate`` was asked for it: it is on its
        way out, so nothing new should be given to it (the host waits for its successor)."""

    @property
    def reason(self) -> ExitReason | None:
        """The exit reason once the actor has started dying, else ``None``."""
        return self._reason

    def watch(
        self, actor_ref: pykka.ActorRef[Any], notify: Notify, *, early: bool
    ) -> tuple[MonitorRef, bool]:
        """Add a watcher. Returns the ref and whether it was added.

        Not added (and inactive) when every Down notice of the actor has already
        gone out: the caller then delivers ``noproc`` or acts on :attr:`reason`.
        """
        mref = MonitorRef(actor_ref, self, notify, early=early)
        with self._lock:
            if self._state == _DEAD:
                mref._active = False
                return mref, False
            (self._early if early else self._ordinary)[mref] = None
            return mref, True

    def unwatch(self, mref: MonitorRef) -> bool:
        """Cancel ``mref``; True if it was still pending (so it will never be delivered)."""
        with self._lock:
            if not mref._active:
                return False
            mref._active = False
            (self._early if mref.early else self._ordinary).pop(mref, None)
            return True

    def die(self, actor_ref: pykka.ActorRef[Any], reason: ExitReason) -> None:
        """Record ``reason`` and deliver one Down to every watcher, early phase first.

        Called exactly once, on the actor's own thread, after it is unregistered
        and has drained its inbox. A second call is ignored. Watchers run on this
        thread, outside the lock; what they raise is logged and ignored.
        """
        with self._lock:
            if self._state != _RUNNING:
                return
            self._state = _DYING
            self._reason = reason
        try:
            while True:
                with self._lock:
                    if self._early:
                        batch, self._early = self._early, {}
                    elif self._ordinary:
                        batch, self._ordinary = self._ordinary, {}
                    else:
                        self._state = _DEAD
                        break
                for mref in batch:
                    with self._lock:
                        if not mref._active:
                            continue
                        mref._active = False
                    try:
                        deliver(mref, Down(mref, actor_ref, reason))
                    except BaseException:  # SystemExit & co.: this thread is ending anyway
                        logger.exception("watcher of %s raised; the others still run", actor_ref)
        finally:
            self.finished.set()


def lifecycle_of(actor_ref: object) -> Lifecycle | None:
    """The lifecycle record attached to a SupervisedActor's ref, or None for any other object."""
    lifecycle = getattr(actor_ref, _LIFECYCLE_ATTR, None)
    return lifecycle if isinstance(lifecycle, Lifecycle) else None


def attach_lifecycle(actor_ref: pykka.ActorRef[Any], lifecycle: Lifecycle) -> None:
    """Attach ``lifecycle`` to ``actor_ref`` so it outlives the actor object itself."""
    setattr(actor_ref, _LIFECYCLE_ATTR, lifecycle)


for _cls in (MonitorRef, Down):
    _cls.__module__ = "supervisor"
