"""Monitors for Pykka actors, after ``erlang:monitor/2`` and its ``DOWN`` message.

``monitor(actor_ref, notify)`` returns a :class:`MonitorRef`; when the actor has
exited, ``notify`` receives one :class:`Down` exactly once, whose ``reason`` is
``"normal"``, ``"shutdown"``, ``"noproc"`` or the exception that killed the actor.

Which actors can be monitored: only :class:`~supervisor.SupervisedActor`
subclasses. Pykka calls no hook when an actor ends (``on_stop``/``on_failure``
are skipped on several paths), and noticing the end of a plain
``pykka.ThreadingActor`` would need polling or a waiter thread per actor. So
``monitor()`` raises ``TypeError`` for a plain actor, naming the fix: subclass
``SupervisedActor``, or wrap the class with :func:`supervisor.supervised_class`.
How a ``SupervisedActor`` detects its own death is described in
``supervisor._actor``: one ``finally`` at the end of its thread, no polling and
nothing added to the per-message path.

When and where ``notify`` runs:

* On the dying actor's own thread, after the actor is unregistered from
  ``pykka.ActorRegistry``, after ``on_stop``/``on_failure`` and after its pending
  asks have failed. Early watchers (``early=True``, used by registries such as
  :class:`~supervisor.SessionStore` to evict entries) all run before any
  ordinary watcher, so a watcher that looks the actor up on ``Down`` never finds
  it. Within a phase, watchers run in the order they were added.
* If the actor had already finished dying, on the *calling* thread, inside
  ``monitor()``, with reason ``noproc``: do not hold a lock ``notify`` needs.
* If ``notify`` is an ``ActorRef``, the ``Down`` is told to it instead (dropped
  if that actor is dead).

What ``notify`` raises is logged and ignored: the other watchers still run.
"""

from __future__ import annotations

from typing import Any

import pykka

from supervisor._lifecycle import NOPROC, Down, MonitorRef, Notify, deliver, lifecycle_of

__all__ = ["demonitor", "monitor"]


def monitor(actor_ref: pykka.ActorRef[Any], notify: Notify, *, early: bool = False) -> MonitorRef:
    """Watch ``actor_ref``: ``notify`` gets exactly one :class:`Down` once the actor has exited.

    Many watchers may monitor the same actor. A watcher added while the actor is
    dying still gets one ``Down`` (with the real reason if the notices are still
    going out, else ``noproc``). Thread-safe; takes the actor's lifecycle lock,
    which is never taken on the per-message path.

    Args:
        actor_ref: Ref of a :class:`~supervisor.SupervisedActor`, alive or not.
        notify: A callable taking the ``Down``, or an ``ActorRef`` to tell it to.
        early: Run in the early phase, before every ordinary watcher. Meant for
            registries that must drop the actor before anyone hears of its death.

    Returns:
        The monitor reference, also found as ``Down.ref``.

    Raises:
        TypeError: ``actor_ref`` is not the ref of a ``SupervisedActor``, or
            ``notify`` is neither callable nor an ``ActorRef``.
    """
    if not (isinstance(notify, pykka.ActorRef) or callable(notify)):
        msg = f"monitor() notify must be a callable or a pykka.ActorRef, got {notify!r}"
        raise TypeError(msg)
    lifecycle = lifecycle_of(actor_ref)
    if lifecycle is None:
        raise TypeError(_not_supervised_message(actor_ref))
    mref, added = lifecycle.watch(actor_ref, notify, early=early)
    if not added:  # every Down of the actor had already gone out
        deliver(mref, Down(mref, actor_ref, NOPROC))
    return mref


def demonitor(ref: MonitorRef) -> bool:
    """Cancel a monitor. Thread-safe, idempotent.

    Returns:
        True if the monitor was pending: no ``Down`` will ever arrive for it.
        False if it was already cancelled, or its ``Down`` was already handed to
        ``notify`` (a callable may still be running it on the dying thread).

    Raises:
        TypeError: ``ref`` is not a ``MonitorRef`` (pass what ``monitor()`` returned,
            not the actor's ``ActorRef``).
    """
    if not isinstance(ref, MonitorRef):
        msg = f"demonitor() needs the MonitorRef that monitor() returned, got {ref!r}" + (
            " (the actor's ref, not its monitor's)" if isinstance(ref, pykka.ActorRef) else ""
        )
        raise TypeError(msg)
    lifecycle = ref._lifecycle
    if lifecycle is None:
        return False
    return lifecycle.unwatch(ref)


def _not_supervised_message(actor_ref: object) -> str:
    if not isinstance(actor_ref, pykka.ActorRef):
        return f"monitor() needs a pykka.ActorRef, got {actor_ref!r}"
    name = actor_ref.actor_class.__name__
    return (
        f"cannot monitor {actor_ref}: {name} is a plain pykka actor, whose death Pykka "
        f"does not report; subclass supervisor.SupervisedActor instead of "
        f"pykka.ThreadingActor, or start supervisor.supervised_class({name})"
    )
