"""An OTP-style supervisor for Pykka actors.

``Supervisor`` is itself a :class:`~supervisor.SupervisedActor`, so it can be a
child of another supervisor and can be monitored. It mirrors OTP's
``supervisor`` and Elixir's ``DynamicSupervisor``:

* strategies ``one_for_one``, ``one_for_all``, ``rest_for_one``;
* restart types ``permanent``, ``transient``, ``temporary``;
* restart intensity: more than ``max_restarts`` restarts within ``max_seconds``
  (defaults 3 in 5 s, as Elixir) and the supervisor stops every child in reverse
  start order, then exits with :class:`~supervisor.RestartIntensityExceeded` as
  its reason, which a parent supervisor treats as any abnormal child exit;
* optional capped exponential :class:`~supervisor.Backoff` between restarts;
* ordered shutdown: children stop in reverse start order, each within its
  ``ChildSpec.shutdown`` seconds. A child that does not stop in time is logged
  and abandoned, still running: Python cannot kill a thread. A nested supervisor
  made by ``Supervisor.child_spec`` without a ``shutdown`` gets, when its stop
  begins, what the children it has then need (dynamic ones included), as OTP
  waits for a supervisor child without limit while it stops its own.

Unlike OTP's ``supervisor``, a child that is not restarted (temporary,
transient after a normal exit, or terminated by ``terminate_child``) is
removed, as in ``DynamicSupervisor``; start it again with ``start_child``.

Everything runs on the supervisor's own thread: children's ``Down`` notices
arrive as messages, and start functions and shutdown waits run there. Use
:class:`~supervisor.SupervisorHandle` to call it from other threads: every call
it makes carries a timeout.

User code never ends the supervisor: on its thread, whatever a start function
raises, ``BaseException`` included (``SystemExit``, ``KeyboardInterrupt``),
is a failed start of that one child (a :class:`~supervisor.ChildStartError`
to the caller of ``start_child``, a failed restart that counts against the
intensity otherwise), and what ``on_give_up`` raises is logged. Only a
deliberate exit (restart intensity exceeded) ends it. The static children of
``Supervisor.start`` start on the caller's thread, where a ``BaseException``
that is not an ``Exception`` propagates unchanged, so Ctrl-C on the main
thread still interrupts.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, get_args

import pykka

from supervisor._actor import SupervisedActor, begin_terminate
from supervisor._calls import (
    ChildStopping,
    CountChildren,
    RestartDue,
    ShutdownChildren,
    StartChild,
    TerminateChild,
    WhichChildren,
)
from supervisor._lifecycle import (
    NOPROC,
    Down,
    ExitReason,
    MonitorRef,
    is_abnormal,
    lifecycle_of,
)
from supervisor.child_spec import ChildCounts, ChildInfo, ChildSpec, RestartType, Strategy
from supervisor.errors import (
    ChildAlreadyExists,
    ChildNotFound,
    ChildStartError,
    RestartIntensityExceeded,
)
from supervisor.intensity import Backoff, Clock, RestartIntensity
from supervisor.monitors import demonitor

__all__ = ["Supervisor"]

logger = logging.getLogger("supervisor")


class _Child:
    """The supervisor's mutable record of one child (touched on its thread only)."""

    __slots__ = (
        "intensity",
        "is_supervisor",
        "mref",
        "pending",
        "ref",
        "spec",
        "started_at",
        "streak",
    )

    def __init__(self, spec: ChildSpec, clock: Clock) -> None:
        self.spec = spec
        self.intensity = (
            None
            if spec.max_restarts is None
            else RestartIntensity(spec.max_restarts, spec.max_seconds, clock)
        )
        self.ref: pykka.ActorRef[Any] | None = None
        self.mref: MonitorRef | None = None
        self.pending: int | None = None  # token of the scheduled restart it waits for
        self.started_at = 0.0
        self.streak = 0  # consecutive restarts, for backoff
        self.is_supervisor = False


def _should_restart(restart: RestartType, reason: ExitReason) -> bool:
    if restart == "permanent":
        return True
    if restart == "transient":
        return is_abnormal(reason)
    return False


class Supervisor(SupervisedActor):
    """Starts, watches and restarts child actors by policy. Talk to it through its ref.

    Thread-safety: state is touched only on the supervisor's thread (and in
    ``__init__`` on the caller's, before that thread exists).

    Args:
        children: Static children, started in order by ``Supervisor.start`` on the
            caller's thread before it returns; if one fails, those already started
            are stopped in reverse order and ``ChildStartError`` is raised (a
            ``BaseException`` that is not an ``Exception`` propagates unchanged there).
        strategy: ``one_for_one``, ``one_for_all`` or ``rest_for_one``.
        max_restarts: Restarts allowed within ``max_seconds`` (>= 0); ``None``
            sets no supervisor-wide limit (for hosts whose children each carry
            their own ``ChildSpec.max_restarts``).
        max_seconds: Length of the intensity window (> 0).
        clock: Monotonic seconds, injectable for tests.
        backoff: Delay restarts per consecutive restart of a child; None restarts at once.
        name: Shown in logs and in ``RestartIntensityExceeded``.
        on_give_up: Called as ``on_give_up(child_id, last_reason)`` on the
            supervisor's thread when a child exceeds its own ``max_restarts`` and
            is given up; what it raises (``BaseException`` included) is logged and
            ignored.
    """

    def __init__(
        self,
        children: Sequence[ChildSpec] = (),
        *,
        strategy: Strategy = "one_for_one",
        max_restarts: int | None = 3,
        max_seconds: float = 5.0,
        clock: Clock = time.monotonic,
        backoff: Backoff | None = None,
        name: str | None = None,
        on_give_up: Callable[[str, ExitReason], None] | None = None,
    ) -> None:
        super().__init__()
        if strategy not in get_args(Strategy):
            msg = f"strategy must be one of {', '.join(get_args(Strategy))}; got {strategy!r}"
            raise ValueError(msg)
        if backoff is not None and not isinstance(backoff, Backoff):
            msg = f"backoff must be a supervisor.Backoff or None, got {backoff!r}"
            raise TypeError(msg)
        if on_give_up is not None and not callable(on_give_up):
            msg = (
                "on_give_up must be None or a callable taking (child_id, reason), "
                f"got {on_give_up!r}"
            )
            raise TypeError(msg)
        if name is not None and not isinstance(name, str):
            msg = f"name must be a str or None, got {name!r}"
            raise TypeError(msg)
        specs = list(children)
        for spec in specs:
            if not isinstance(spec, ChildSpec):
                msg = f"children must be ChildSpec instances, got {spec!r}"
                raise TypeError(msg)
        ids = [spec.id for spec in specs]
        if len(set(ids)) != len(ids):
            msg = f"child ids must be unique, got {ids}"
            raise ValueError(msg)
        self._strategy: Strategy = strategy
        self._clock = clock
        self._intensity = (
            None if max_restarts is None else RestartIntensity(max_restarts, max_seconds, clock)
        )
        if max_restarts is None:
            _ = RestartIntensity(0, max_seconds, clock)  # still validate max_seconds and clock
        self._on_give_up = on_give_up
        self._backoff = backoff
        self._name = name if name is not None else f"Supervisor-{self.actor_urn[-8:]}"
        self._children: dict[str, _Child] = {}  # by id, in start order
        self._due: dict[int, list[_Child]] = {}  # restart token -> the group it restarts
        self._by_mref: dict[MonitorRef, _Child] = {}
        self._timers: dict[int, threading.Timer] = {}
        self._tokens = itertools.count()
        try:
            for spec in specs:
                child = _Child(spec, self._clock)
                self._children[spec.id] = child  # ids are unique: checked by ``start``
                self._start(child)
        except BaseException:
            self._shutdown_children()
            raise

    @classmethod
    def child_spec(
        cls,
        id: str,
        children: Sequence[ChildSpec] = (),
        *,
        restart: RestartType = "permanent",
        shutdown: float | None = None,
        **options: Any,
    ) -> ChildSpec:
        """A ChildSpec that starts a nested supervisor with ``children`` and ``options``.

        ``shutdown`` defaults to the sum of the children's timeouts plus one
        second (at least 5 s), so the nested tree can stop in order; counted again
        when its stop begins, over the children it has then: those added by
        ``start_child`` count too (and a nested supervisor's own default, likewise).
        """
        specs = tuple(children)
        if shutdown is not None:
            return ChildSpec(
                id=id, start=lambda: cls.start(specs, **options), restart=restart, shutdown=shutdown
            )
        return ChildSpec(
            id=id,
            start=_NestedStart(cls, specs, options),
            restart=restart,
            shutdown=max(5.0, sum(spec.shutdown for spec in specs) + 1.0),
        )

    # -- Pykka hooks (all on the supervisor's thread) -------------------------

    def on_receive(self, message: Any) -> Any:
        """Handle a child's Down, a due restart, or a call from ``SupervisorHandle``.

        Raising from a ``Down`` (restart intensity exceeded) kills the supervisor
        with that reason; a call's exception goes back to its caller.
        """
        match message:
            case Down():
                self._on_down(message)
            case StartChild(spec):
                return self._start_child(spec)
            case TerminateChild(child_id):
                return self._terminate_child(child_id)
            case WhichChildren():
                return self._which_children()
            case CountChildren():
                return self._count_children()
            case ShutdownChildren(concurrently):
                return self._shutdown_children(concurrently=concurrently)
            case RestartDue(token):
                self._restart_due(token)
            case _:
                return super().on_receive(message)
        return None

    def on_stop(self) -> None:
        """Stop every child in reverse start order (runs on the supervisor's thread)."""
        self._shutdown_children()

    def on_failure(self, *_exc_info: Any) -> None:
        """After a crash of the supervisor itself, still stop its children in order."""
        self._shutdown_children()

    # -- starting and stopping children ---------------------------------------

    def _start(self, child: _Child) -> None:
        spec = child.spec
        try:
            ref = spec.start()
        except Exception as exc:
            raise ChildStartError(spec.id, exc) from exc
        except BaseException as exc:
            if self._sv_lifecycle.thread != threading.get_ident():
                raise  # a static child, on the caller's thread: Ctrl-C stays Ctrl-C there
            logger.warning(
                "%s: the start function of child %r raised %r, which is not an Exception; "
                "treated as a failed start so the supervisor and its other children go on",
                self._name,
                spec.id,
                exc,
                exc_info=exc,
            )
            raise ChildStartError(spec.id, exc) from exc
        lifecycle = lifecycle_of(ref)
        if lifecycle is None:
            if isinstance(ref, pykka.ActorRef):
                ref.stop(block=False)
            err = TypeError(
                f"start must return the ref of a supervisor.SupervisedActor, got {ref!r}"
            )
            raise ChildStartError(spec.id, err) from err
        mref, added = lifecycle.watch(ref, self.actor_ref, early=False)
        child.ref, child.mref, child.pending = ref, mref, None
        child.started_at = self._clock()
        child.is_supervisor = issubclass(ref.actor_class, Supervisor)
        self._by_mref[mref] = child
        if not added:  # it died before we could watch it: act on its recorded reason
            self.actor_ref.tell(Down(mref, ref, lifecycle.reason or NOPROC))

    def _stop_child(self, child: _Child) -> bool:
        """Stop one child and forget its ref; False if it had to be abandoned."""
        return self._begin_stop(child).wait()

    def _begin_stop(self, child: _Child) -> ChildStopping:
        """Forget the child's ref and ask it to stop, without waiting for it."""
        shutdown = _shutdown_of(child)
        ref, mref = child.ref, child.mref
        child.ref = child.mref = child.pending = None
        if mref is not None:
            self._by_mref.pop(mref, None)
            demonitor(mref)
        lifecycle = None if ref is None else begin_terminate(ref)
        return ChildStopping(lifecycle, shutdown, self._name, child.spec.id)

    def _shutdown_children(self, *, concurrently: bool = False) -> list[str]:
        """Stop all children in reverse start order; returns the ids of abandoned ones.

        Each child is stopped once the later ones have (OTP's order, for children that
        depend on their elder siblings), within its own ``shutdown``: stuck children
        add up. ``concurrently`` asks them all to stop at once and waits for each within
        its ``shutdown`` counted from then, as OTP stops a ``simple_one_for_one``
        supervisor's many independent children: the wait is the longest, not the sum.
        """
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        children = list(reversed(self._children.values()))
        if concurrently:
            began = time.monotonic()
            stopping = [self._begin_stop(child) for child in children]
            abandoned = [stop.child_id for stop in stopping if not stop.wait_from(began)]
        else:
            abandoned = [child.spec.id for child in children if not self._stop_child(child)]
        self._children.clear()
        self._due.clear()
        self._by_mref.clear()
        return abandoned

    # -- restarts --------------------------------------------------------------

    def _on_down(self, down: Down) -> None:
        child = self._by_mref.pop(down.ref, None)
        if child is None or child.ref is not down.actor_ref:
            return  # a child we terminated or replaced already
        child.ref = child.mref = None
        if not _should_restart(child.spec.restart, down.reason):
            del self._children[child.spec.id]
            return
        logger.info("%s: child %r exited (%r); restarting", self._name, child.spec.id, down.reason)
        self._restart_group(child, down.reason)

    def _restart_group(
        self, child: _Child, reason: ExitReason, *, failed_start: bool = False
    ) -> None:
        """Apply the strategy after ``child`` died (or failed to start) and must restart.

        After a ``failed_start`` the child never ran: its backoff streak grows
        whatever it did before (a child that ran for hours, then cannot start
        because what it needs is down, backs off more and more), and even an
        undelayed restart goes through the inbox, so repeated failures never recurse.
        """
        if child.intensity is not None and not child.intensity.allow():
            self._give_up_child(child, reason)
            return
        if self._intensity is not None and not self._intensity.allow():
            self._give_up(child, reason)
        if self._backoff is not None:
            uptime = 0.0 if failed_start else self._clock() - child.started_at
            child.streak = 1 if uptime >= self._backoff.reset_after else child.streak + 1
        if self._strategy == "one_for_one":
            group = [child]
        else:
            group = list(self._children.values())
            if self._strategy == "rest_for_one":
                group = group[group.index(child) :]
        for sibling in reversed(group):
            if sibling is not child:
                self._stop_child(sibling)
                if sibling.spec.restart == "temporary":
                    del self._children[sibling.spec.id]
        group = [c for c in group if c is child or c.spec.restart != "temporary"]
        token = next(self._tokens)
        for member in group:
            member.pending = token
        self._due[token] = group
        delay = 0.0 if self._backoff is None else self._backoff.delay(child.streak)
        if delay == 0 and failed_start:
            self.actor_ref.tell(RestartDue(token))
        elif delay > 0:
            timer = threading.Timer(delay, self._tell_due, args=(token,))
            timer.name = f"{self._name}-backoff-{token}"
            timer.daemon = True
            self._timers[token] = timer
            timer.start()
        else:
            self._restart_due(token)

    def _tell_due(self, token: int) -> None:
        """Runs on a timer thread: hand the due restart back to the supervisor's thread."""
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(RestartDue(token))

    def _restart_due(self, token: int) -> None:
        self._timers.pop(token, None)
        for child in self._due.pop(token, []):
            if child.pending != token or self._children.get(child.spec.id) is not child:
                continue  # superseded by a restart started meanwhile, or removed
            try:
                self._start(child)
            except ChildStartError as err:
                logger.error("%s: restarting %r failed: %r", self._name, child.spec.id, err.cause)
                self._restart_group(child, err.cause, failed_start=True)
                if self._children.get(child.spec.id) is child:
                    return  # its group's restart is scheduled again
                # Given up alone (past its own intensity): the rest of its group still starts.

    def _give_up_child(self, child: _Child, reason: ExitReason) -> None:
        """``child`` exceeded its own intensity: drop it alone and report it."""
        assert child.intensity is not None
        self._stop_child(child)
        del self._children[child.spec.id]
        logger.error(
            "%s: child %r exceeded its restart intensity (%d in %s s); given up. "
            "Last exit reason: %r",
            self._name,
            child.spec.id,
            child.intensity.max_restarts,
            child.intensity.max_seconds,
            reason,
            exc_info=reason if isinstance(reason, BaseException) else None,
        )
        if self._on_give_up is not None:
            try:
                self._on_give_up(child.spec.id, reason)
            except BaseException:  # user code on this thread: it must not end the supervisor
                logger.exception("%s: on_give_up callback failed", self._name)

    def _give_up(self, child: _Child, reason: ExitReason) -> None:
        assert self._intensity is not None
        err = RestartIntensityExceeded(
            self._name,
            child.spec.id,
            reason,
            self._intensity.max_restarts,
            self._intensity.max_seconds,
        )
        if isinstance(reason, BaseException):
            err.__cause__ = reason
        self._shutdown_children()
        raise err

    # -- calls from SupervisorHandle -------------------------------------------

    def _find(self, child_id: str) -> _Child:
        child = self._children.get(child_id)
        if child is None:
            raise ChildNotFound(child_id)
        return child

    def _start_child(self, spec: ChildSpec) -> pykka.ActorRef[Any]:
        if not isinstance(spec, ChildSpec):
            msg = f"start_child needs a ChildSpec, got {spec!r}"
            raise TypeError(msg)
        if spec.id in self._children:
            raise ChildAlreadyExists(spec.id)
        child = _Child(spec, self._clock)
        self._children[spec.id] = child
        try:
            self._start(child)
        except ChildStartError:
            del self._children[spec.id]
            raise
        assert child.ref is not None
        return child.ref

    def _terminate_child(self, child_id: str) -> ChildStopping:
        """Remove the child and ask it to stop; the caller waits for it to finish (the
        handle does), so this supervisor is not held up by a child's slow ``on_stop``."""
        child = self._find(child_id)
        stopping = self._begin_stop(child)
        del self._children[child_id]
        return stopping

    def _which_children(self) -> list[ChildInfo]:
        return [
            ChildInfo(c.spec.id, c.ref, c.spec.restart, c.is_supervisor, _shutdown_of(c))
            for c in self._children.values()
        ]

    def _count_children(self) -> ChildCounts:
        children = self._children.values()
        supervisors = sum(1 for c in children if c.is_supervisor)
        return ChildCounts(
            specs=len(self._children),
            active=sum(1 for c in children if c.ref is not None and c.ref.is_alive()),
            supervisors=supervisors,
            workers=len(self._children) - supervisors,
        )


class _NestedStart:
    """The start function of a ``Supervisor.child_spec`` left to its default shutdown,
    which marks it so: its wait is counted when its stop begins (``_shutdown_of``)."""

    __slots__ = ("_cls", "_options", "_specs")

    def __init__(
        self, cls: type[Supervisor], specs: tuple[ChildSpec, ...], options: dict[str, Any]
    ) -> None:
        self._cls, self._specs, self._options = cls, specs, options

    def __call__(self) -> pykka.ActorRef[Any]:
        return self._cls.start(self._specs, **self._options)


def _shutdown_of(child: _Child) -> float:
    """How long to wait for ``child`` to stop: its ``ChildSpec.shutdown``; for a running
    nested supervisor with the default of ``Supervisor.child_spec``, at least what its
    children now need, one after the other (the sum of theirs, plus one second).

    Runs on the parent's thread and reads the nested one's children, which its own
    thread changes: a copy of a dict's values is one step under the GIL, and one that
    fails all the same (the dict changed size) falls back on the spec's value.
    """
    ref = child.ref
    if ref is None or not child.is_supervisor or not isinstance(child.spec.start, _NestedStart):
        return child.spec.shutdown
    lifecycle = lifecycle_of(ref)
    nested = None if lifecycle is None else lifecycle.actor()
    if not isinstance(nested, Supervisor):
        return child.spec.shutdown
    try:
        children = tuple(nested._children.values())
    except RuntimeError:  # pragma: no cover - changed while copied
        return child.spec.shutdown
    return max(child.spec.shutdown, sum(_shutdown_of(c) for c in children) + 1.0)


for _cls in (Supervisor,):
    _cls.__module__ = "supervisor"
