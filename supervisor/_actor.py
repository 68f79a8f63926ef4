"""``SupervisedActor``: a ``pykka.ThreadingActor`` whose death is always noticed, exactly once.

How it hooks into Pykka (pinned to ``pykka>=4,<5``, whose private loop it overrides):

``Actor.start()`` runs ``_actor_loop`` on a new thread; Pykka's loop is setup
(``on_start``), the receive loop, and a teardown that fails pending asks. We keep
that shape and close its holes:

* **One choke point.** ``_actor_loop`` ends in a ``finally`` that unregisters the
  actor, sets its stopped flag, fails every queued ``ask`` with ``ActorDeadError``,
  then calls :meth:`Lifecycle.die` with the recorded exit reason. Every way an
  actor can end passes there, so watchers are told once and only once.
* **The reason** is recorded on the rare paths only: the first exception Pykka
  hands to ``_handle_failure`` (``on_start`` raising, a ``tell`` raising,
  ``on_stop`` raising), a ``BaseException`` in a handler, or the stop message
  that ended the loop (:func:`terminate` sends one that means ``shutdown``).
  The receive loop does exactly the work of Pykka's per message: no lock, no
  extra call, no polling.
* **SystemExit / KeyboardInterrupt** inside a handler stop *this* actor with that
  exception as reason (Pykka would call ``ActorRegistry.stop_all()``); an ``ask``
  that was being handled fails with ``ActorDeadError`` caused by it, never hangs.
* ``on_start`` raising is a death with that exception; as in Pykka neither
  ``on_failure`` nor ``on_stop`` runs then. A ``tell`` raising is a death and
  ``on_failure`` runs first. An ``ask``/proxy call raising returns the
  exception to the caller and is *not* a death.

Not closable from inside the actor: ``ask()`` checks the stopped flag and then
enqueues, so an ask racing the very end of the actor can land after the final
drain and never resolve (the inbox is drained a second time after the Down
notices to narrow this window). Always pass ``timeout=`` to ``ask``/``get``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import pykka
from pykka import messages

from actors._later import LaterAnswer, reply
from actors._mailbox import new_inbox, new_reply
from supervisor._lifecycle import (
    NORMAL,
    SHUTDOWN,
    ExitReason,
    Lifecycle,
    attach_lifecycle,
    lifecycle_of,
)
from supervisor.errors import Killed

if TYPE_CHECKING:
    from types import TracebackType

    from pykka._envelope import Envelope

    from supervisor._session_threads import SessionThreads

__all__ = ["SupervisedActor", "begin_terminate", "kill", "supervised_class", "terminate"]

logger = logging.getLogger("supervisor")

A = TypeVar("A", bound=pykka.ThreadingActor)

_thread_numbers = itertools.count(1)


class _ShutdownStop(messages._ActorStop):
    """Pykka's stop message, marked as coming from a supervisor: the exit reason is ``shutdown``."""

    __slots__ = ()


class SupervisedActor(pykka.ThreadingActor):
    """A Pykka threading actor that can be monitored and supervised.

    Subclass it instead of ``pykka.ThreadingActor`` (or wrap an existing class with
    :func:`supervised_class`). Hooks keep their Pykka meaning and thread: all of
    ``on_start``, ``on_receive``, ``on_failure`` and ``on_stop`` run on the actor's
    own thread. See the module docstring for how deaths are detected.

    Thread-safety: like any Pykka actor, talk to it only through its ``ActorRef``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sv_reason: ExitReason | None = None
        self._sv_lifecycle = Lifecycle()
        self._sv_lifecycle.actor = weakref.ref(self)
        attach_lifecycle(self.actor_ref, self._sv_lifecycle)

    # A C-level inbox and a one-lock reply slot: faster hand-offs than Pykka's defaults.
    _create_actor_inbox = staticmethod(new_inbox)
    _create_future = staticmethod(new_reply)

    _sv_threads: ClassVar[SessionThreads | None] = None
    """Where this class's actors run their loops: ``None``, each on a new thread of its
    own (Pykka's way); else on these ``SessionThreads`` (a parked thread, when one waits:
    ``start`` then does not wait for a new thread to run; those threads are never daemon
    threads, whatever ``use_daemon_thread`` says). Private: a ``ThreadRuntime`` sets it on
    its own subclass of the session actor."""

    def _start_actor_loop(self) -> None:
        if lifecycle_of(self.actor_ref) is None:
            msg = (
                f"{type(self).__name__}.__init__() did not run SupervisedActor.__init__(); "
                "did you forget super().__init__() in your override?"
            )
            pykka.ActorRegistry.unregister(self.actor_ref)  # start() registered it already
            self.actor_stopped.set()
            raise TypeError(msg)
        threads = self._sv_threads
        if threads is None:
            super()._start_actor_loop()
        else:  # named as Pykka names an actor's thread
            threads.run(self._actor_loop, f"{type(self).__name__}-{next(_thread_numbers)}")

    # -- the one choke point -------------------------------------------------

    def _actor_loop(self) -> None:
        self._sv_lifecycle.thread = threading.get_ident()
        try:
            self._actor_loop_setup()
            self._actor_loop_running()
        except BaseException as exc:  # a hook escaped Pykka's own handling
            self._sv_abort(exc, None, call_on_failure=False)
        finally:
            self._sv_finish()

    def _sv_finish(self) -> None:
        pykka.ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()
        try:
            self._actor_loop_teardown()
        finally:
            reason: ExitReason = NORMAL if self._sv_reason is None else self._sv_reason
            self._sv_lifecycle.die(self.actor_ref, reason)
            self._actor_loop_teardown()  # asks that slipped in while watchers ran

    # -- rare paths that record the exit reason -------------------------------

    def _actor_loop_setup(self) -> None:
        try:
            self.on_start()
        except Exception:
            self._handle_failure(*sys.exc_info())
        except BaseException as exc:
            self._sv_abort(exc, None, call_on_failure=False)

    def _actor_loop_running(self) -> None:
        inbox = self.actor_inbox
        stopped = self.actor_stopped
        envelope: Envelope[Any] | None = None
        later: LaterAnswer | None = None  # the last turn's, while its save may be pending
        while not stopped.is_set():
            envelope = inbox.get()
            try:
                if later is not None:  # before any message, a kill or a stop included
                    settling, later = later, None
                    settling.settle()
                if envelope.message.__class__ is _Kill:  # identity test: no cost per message
                    raise Killed(envelope.message.reason)
                # a turn's LaterAnswer answers once its save is durable (``actors._later``)
                later = reply(self._handle_receive(envelope.message), envelope.reply_to)
            except Exception:
                if envelope.reply_to is not None:
                    logger.info("exception returned from %s to caller", self, exc_info=True)
                    envelope.reply_to.set_exception()
                else:
                    self._handle_failure(*sys.exc_info())
                    self._sv_call_on_failure(*sys.exc_info())
            except BaseException as exc:
                self._sv_abort(exc, envelope, call_on_failure=True)
        if (
            self._sv_reason is None
            and envelope is not None
            and isinstance(envelope.message, _ShutdownStop)
        ):
            self._sv_reason = SHUTDOWN

    def _handle_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._sv_reason is None and exception_value is not None:
            self._sv_reason = exception_value
        if isinstance(exception_value, Killed):  # asked for: no "unhandled exception" traceback
            logger.debug("%s was killed: %s", self, exception_value)
            pykka.ActorRegistry.unregister(self.actor_ref)
            self.actor_stopped.set()
            return
        super()._handle_failure(exception_type, exception_value, traceback)

    def _sv_call_on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.on_failure(exception_type, exception_value, traceback)
        except Exception:
            self._handle_failure(*sys.exc_info())

    def _sv_abort(
        self, exc: BaseException, envelope: Envelope[Any] | None, *, call_on_failure: bool
    ) -> None:
        """Stop this actor alone after a BaseException; fail the ask being handled, if any."""
        logger.error("%r in %s: stopping this actor only", exc, self, exc_info=exc)
        if self._sv_reason is None:
            self._sv_reason = exc
        if envelope is not None and envelope.reply_to is not None:
            dead = pykka.ActorDeadError(f"{self.actor_ref} exited with {exc!r} handling it")
            dead.__cause__ = exc
            # queue.Full: the reply was already set before the BaseException.
            with contextlib.suppress(queue.Full):
                envelope.reply_to.set_exception(exc_info=(type(dead), dead, None))
        pykka.ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()
        if call_on_failure:
            self._sv_call_on_failure(type(exc), exc, exc.__traceback__)


class _Kill:
    """Told by :func:`kill`; the receive loop turns it into a ``Killed`` exit."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def kill(actor_ref: pykka.ActorRef[Any], reason: str = "killed") -> None:
    """Make a SupervisedActor exit abnormally with ``Killed(reason)``, as OTP's ``exit(Pid, kill)``.

    For operators and tests: supervisors and monitors see a crash. The kill
    is queued behind the messages already in the inbox and takes effect when
    the actor finishes its current message (Python cannot interrupt a
    thread). ``on_failure`` runs, ``on_stop`` does not. Thread-safe; returns
    at once; a no-op for an actor that is already dead.

    Raises:
        TypeError: ``actor_ref`` is not the ref of a SupervisedActor.
    """
    lifecycle = lifecycle_of(actor_ref)
    if lifecycle is None:
        msg = f"kill() needs the ref of a supervisor.SupervisedActor, got {actor_ref!r}"
        raise TypeError(msg)
    lifecycle.ending = True
    with contextlib.suppress(pykka.ActorDeadError):
        actor_ref.tell(_Kill(reason))


def terminate(actor_ref: pykka.ActorRef[Any], timeout: float) -> bool:
    """Stop a SupervisedActor with reason ``shutdown`` and wait until its Down notices are out.

    The stop request is queued behind the messages already in the inbox (Pykka
    has no out-of-band signal). Thread-safe; blocks the caller up to ``timeout``.

    Args:
        actor_ref: A SupervisedActor's ref (alive or not).
        timeout: Seconds to wait for the actor to finish.

    Returns:
        True if the actor is gone (or already was); False if it did not stop in
        time. Python cannot kill a thread: such an actor is abandoned, still running.

    Raises:
        TypeError: ``actor_ref`` is not the ref of a SupervisedActor.
    """
    return begin_terminate(actor_ref).finished.wait(timeout)


def begin_terminate(actor_ref: pykka.ActorRef[Any]) -> Lifecycle:
    """``terminate`` without the wait: the stop request is sent; the returned lifecycle's
    ``finished`` event is set once the actor's Down notices are out. Thread-safe.

    Raises:
        TypeError: ``actor_ref`` is not the ref of a SupervisedActor.
    """
    lifecycle = lifecycle_of(actor_ref)
    if lifecycle is None:
        msg = f"terminate() needs the ref of a supervisor.SupervisedActor, got {actor_ref!r}"
        raise TypeError(msg)
    lifecycle.ending = True
    with contextlib.suppress(pykka.ActorDeadError):
        actor_ref.tell(_ShutdownStop())
    return lifecycle


_supervised_classes: dict[type[Any], type[Any]] = {}
_supervised_lock = threading.Lock()


def supervised_class(actor_class: type[A]) -> type[A]:
    """Return a subclass of ``actor_class`` that is also a :class:`SupervisedActor`.

    For actors defined where ``supervisor`` may not be imported (the ``actors``
    package). The subclass is created once per class and cached. Thread-safe.

    Raises:
        TypeError: ``actor_class`` is not a ``pykka.ThreadingActor`` subclass.
    """
    if isinstance(actor_class, type) and issubclass(actor_class, SupervisedActor):
        return actor_class
    if not (isinstance(actor_class, type) and issubclass(actor_class, pykka.ThreadingActor)):
        msg = f"supervised_class() needs a pykka.ThreadingActor subclass, got {actor_class!r}"
        raise TypeError(msg)
    with _supervised_lock:
        cls = _supervised_classes.get(actor_class)
        if cls is None:
            cls = type(
                f"Supervised{actor_class.__name__}",
                (SupervisedActor, actor_class),
                {"__module__": actor_class.__module__},
            )
            _supervised_classes[actor_class] = cls
    return cls


for _cls in (SupervisedActor,):
    _cls.__module__ = "supervisor"
