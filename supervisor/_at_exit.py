"""Shutting down, at interpreter exit, what a program left running.

Pykka actor threads are not daemon threads, and at exit Python joins every
non-daemon thread *before* it runs ``atexit`` handlers: an ``AgentHost`` that
was never shut down would keep the process waiting for its actors forever.
``threading._register_atexit`` (private, but what ``concurrent.futures`` uses
for its executors) runs a function once the main thread has finished and
before those joins. One such function is registered per process, on first
use; it calls ``_shutdown_at_exit()`` on everything still registered, newest
first, on the main thread.

Registrations hold weak references only, so they never keep an object alive;
``unregister`` drops one (an explicit shutdown does). A forked child forgets
its parent's registrations: their threads do not exist in it.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

__all__ = ["ShutsDownAtExit", "register", "unregister"]

logger = logging.getLogger("supervisor")


class ShutsDownAtExit(Protocol):
    """What ``register`` takes."""

    def _shutdown_at_exit(self) -> None:
        """Shut down, bounded by one's own timeouts, on the main thread at interpreter
        exit (before Python joins non-daemon threads); an exception is logged."""


_registered: weakref.WeakValueDictionary[int, ShutsDownAtExit] = weakref.WeakValueDictionary()
_tokens = itertools.count()
_hook_lock = threading.Lock()
_hooked = False


def register(obj: ShutsDownAtExit) -> int:
    """Have ``obj`` shut down at interpreter exit unless ``unregister``-ed first.

    Returns the token to pass to ``unregister``. Thread-safe. An object
    registered after the main thread has finished (by a thread that outlived
    it) is not covered: Python no longer takes such functions then.
    """
    _install_hook()
    token = next(_tokens)
    _registered[token] = obj
    return token


def unregister(token: int) -> None:
    """Forget a registration (idempotent, thread-safe)."""
    _registered.pop(token, None)


def _install_hook() -> None:
    global _hooked  # noqa: PLW0603 (one hook per process, installed on first use)
    with _hook_lock:
        if _hooked:
            return
        install: Callable[[Callable[[], None]], None] | None = getattr(
            threading, "_register_atexit", None
        )
        if install is None:  # pragma: no cover - every CPython and PyPy since 3.9 has it
            logger.warning("threading._register_atexit is missing: no shutdown at exit")
        else:
            try:
                install(_shutdown_all)
            except RuntimeError:  # the main thread has finished: too late for this process
                logger.warning("registered after interpreter shutdown began: no shutdown at exit")
                return
        os.register_at_fork(after_in_child=_registered.clear)
        _hooked = True


def _shutdown_all() -> None:
    """The hook: shut down every registered object, newest first; never raises."""
    for token, obj in sorted(_registered.items(), key=lambda item: item[0], reverse=True):
        unregister(token)
        try:
            obj._shutdown_at_exit()
        except Exception:
            logger.exception("shutting down %r at interpreter exit failed", obj)
