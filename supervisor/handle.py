"""``SupervisorHandle``: the typed, timeout-bounded way to call a running ``Supervisor``."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pykka

from supervisor._ask_later import ask_and_wait
from supervisor._calls import (
    ChildStopping,
    CountChildren,
    ShutdownChildren,
    StartChild,
    TerminateChild,
    WhichChildren,
)
from supervisor._lifecycle import ExitReason, lifecycle_of
from supervisor.child_spec import ChildCounts, ChildInfo, ChildSpec, Strategy
from supervisor.intensity import Backoff, Clock
from supervisor.supervisor import Supervisor

__all__ = ["SupervisorHandle"]


class SupervisorHandle:
    """A client of one ``Supervisor`` actor; every call is an ``ask`` with a timeout.

    Thread-safe: it holds only the ref and the timeout, and each call is a message
    to the supervisor, which handles them one at a time on its own thread. Never
    call it from a child's start function or hooks (the supervisor would wait on
    itself until the timeout): a call made on the supervisor's own thread (a start
    function, ``on_give_up``) raises ``RuntimeError`` at once instead.

    Args:
        actor_ref: The supervisor's ref (e.g. from ``Supervisor.start`` or from a
            parent's ``which_children()``).
        timeout: Seconds each call may take, plus the children's shutdown
            timeouts for calls that stop children.
    """

    __slots__ = ("_ref", "_timeout")

    def __init__(self, actor_ref: pykka.ActorRef[Supervisor], *, timeout: float = 5.0) -> None:
        if not (
            isinstance(actor_ref, pykka.ActorRef) and issubclass(actor_ref.actor_class, Supervisor)
        ):
            msg = f"SupervisorHandle needs the ref of a supervisor.Supervisor, got {actor_ref!r}"
            raise TypeError(msg)
        self._ref = actor_ref
        self._timeout = _checked_timeout(timeout)

    @classmethod
    def start(
        cls,
        children: Sequence[ChildSpec] = (),
        *,
        strategy: Strategy = "one_for_one",
        max_restarts: int | None = 3,
        max_seconds: float = 5.0,
        clock: Clock = time.monotonic,
        backoff: Backoff | None = None,
        name: str | None = None,
        on_give_up: Callable[[str, ExitReason], None] | None = None,
        timeout: float = 5.0,
    ) -> SupervisorHandle:
        """Start a ``Supervisor`` (its static children first, on this thread) and wrap it.

        Raises:
            ChildStartError: a static child failed to start; the ones already
                started were stopped in reverse order.
            ValueError, TypeError: an invalid option (the message names it).
        """
        _checked_timeout(timeout)  # before the supervisor's thread starts: nothing to leak
        ref = Supervisor.start(
            children,
            strategy=strategy,
            max_restarts=max_restarts,
            max_seconds=max_seconds,
            clock=clock,
            backoff=backoff,
            name=name,
            on_give_up=on_give_up,
        )
        return cls(ref, timeout=timeout)

    @property
    def actor_ref(self) -> pykka.ActorRef[Supervisor]:
        """The supervisor's ref: monitor it to learn why it exited."""
        return self._ref

    def is_alive(self) -> bool:
        """Whether the supervisor is still running."""
        return self._ref.is_alive()

    def start_child(self, spec: ChildSpec) -> pykka.ActorRef[Any]:
        """Start a dynamic child (after the existing ones in start order) and return its ref.

        Raises:
            ChildAlreadyExists: the id is taken.
            ChildStartError: its start function failed; nothing was added.
            pykka.ActorDeadError, pykka.Timeout: the supervisor is gone or stuck.
        """
        ref: pykka.ActorRef[Any] = self._call(StartChild(spec), timeout=self._timeout)
        return ref

    def terminate_child(self, child_id: str, *, shutdown: float | None = None) -> bool:
        """Stop a child (reason ``shutdown``) and remove it; it will not be restarted.

        Returns once the child has finished. The supervisor only sends the stop: the
        wait is this caller's, so the supervisor serves other calls meanwhile.

        Args:
            child_id: The child's id.
            shutdown: Seconds to wait for it; its ``ChildSpec.shutdown`` if ``None``.

        Returns:
            True if it stopped within that time; False if it was abandoned.

        Raises:
            ChildNotFound: no such child.
            TypeError, ValueError: ``shutdown`` is not a positive, finite number of
                seconds (checked before anything is stopped).
        """
        if shutdown is not None:
            shutdown = _checked_timeout(shutdown, "shutdown")
        stopping: ChildStopping = self._call(TerminateChild(child_id), timeout=self._timeout)
        return stopping.wait(shutdown)

    def which_children(self) -> list[ChildInfo]:
        """The children in start order, with their current refs."""
        children: list[ChildInfo] = self._call(WhichChildren(), timeout=self._timeout)
        return children

    def count_children(self) -> ChildCounts:
        """How many children there are, how many run, and how many are supervisors."""
        counts: ChildCounts = self._call(CountChildren(), timeout=self._timeout)
        return counts

    def stop(self, *, concurrently: bool = False) -> list[str]:
        """Stop the children in reverse start order, then the supervisor itself.

        Waits for each child at most its shutdown timeout; returns the ids of the
        children that did not stop in time and were abandoned (still running:
        Python cannot kill a thread). A supervisor that is already gone returns [].
        One too busy to answer within the timeout (a child's start that hangs) raises
        ``pykka.Timeout`` and stops its children, then itself, once it is free.

        Args:
            concurrently: Ask every child to stop at once, and wait for each at most
                its shutdown timeout counted from then (the longest, not their sum),
                for independent children such as a host's sessions; by default each
                child is stopped only once the later-started ones have (OTP's order).
        """
        try:
            shutdowns = [c.shutdown for c in self.which_children()]
            waits = max(shutdowns, default=0.0) if concurrently else sum(shutdowns)
            budget = min(self._timeout + waits, threading.TIMEOUT_MAX)  # Python's longest
            abandoned: list[str] = self._call(ShutdownChildren(concurrently), timeout=budget)
        except pykka.ActorDeadError:
            return []
        except pykka.Timeout:
            # Busy past the timeout (a child's start that hangs): it stops its children in
            # reverse order, then itself, once it is free, instead of running on forgotten.
            self._ref.stop(block=False)
            raise
        self._ref.stop(timeout=self._timeout)
        lifecycle = lifecycle_of(self._ref)
        if lifecycle is not None:
            lifecycle.finished.wait(self._timeout)
        return abandoned

    def _call(self, message: object, timeout: float) -> Any:
        lifecycle = lifecycle_of(self._ref)
        # Until ``finished`` is set the supervisor's thread runs, so no other thread has
        # its ident: equal idents mean this is that thread.
        if (
            lifecycle is not None
            and lifecycle.thread == threading.get_ident()
            and not lifecycle.finished.is_set()
        ):
            msg = (
                f"SupervisorHandle called on {self._ref}'s own thread (from a child's start "
                "function or on_give_up): the supervisor would wait on itself until the "
                "timeout; call it from another thread"
            )
            raise RuntimeError(msg)
        return ask_and_wait(self._ref, message, timeout)

    def __repr__(self) -> str:
        return f"<SupervisorHandle of {self._ref}>"


def _checked_timeout(timeout: object, name: str = "timeout") -> float:
    """``timeout`` if it is a positive, finite number of seconds (``name`` is the
    argument's name, for the message).

    Raises:
        TypeError: not a number (``bool`` included).
        ValueError: not positive, or not finite.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(timeout).__name__}")
    if not 0 < timeout < math.inf:
        raise ValueError(f"{name} must be > 0 seconds and finite, got {timeout!r}")
    return float(timeout)


for _cls in (SupervisorHandle,):
    _cls.__module__ = "supervisor"
