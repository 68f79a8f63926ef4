"""How a worker's pipe is waited on, chosen once per process at import.

Two backends, one module each: ``_io_epoll`` (Linux: ``epoll`` sets another
thread may change while one waits, and ``eventfd`` wake-ups), with which a
caller waiting for its reply, or an idle session in a worker, reads the pipe
itself and no thread hand-off is needed (those two wait in a blocking ``read``
of the pipe; the reader threads they take the pipe from wait in the ``epoll``
sets); and ``_io_portable`` (plain ``poll``), with which the reader thread
of each end reads its pipe (on the host's end a caller may read it too, only while
the reader thread does not poll it: ``WorkerClient``). ``DEFAULT`` is
the best the platform has. ``named("portable")`` selects the portable
one on any platform (``AgentHost(worker_io="portable")``), so its path is
tested on Linux too. No flag changes at run time: each ``WorkerClient`` and
each worker is built with one backend and keeps it.
"""

from __future__ import annotations

import os
import select
from typing import Protocol

from supervisor.workers._io_epoll import EpollIO
from supervisor.workers._io_portable import PortableIO

__all__ = ["DEFAULT", "IO_CHOICES", "PipeIO", "Poller", "named"]


class Poller(Protocol):
    """A set of file descriptors to wait on for input."""

    def poll(self, timeout: float | None = None) -> list[int]:
        """The ready descriptors, waiting up to ``timeout`` seconds (``None``: forever)."""
        ...

    def pause(self, fd: int) -> None:
        """Stop reporting ``fd`` (shared backends only): another thread reads it now."""
        ...

    def resume(self, fd: int) -> None:
        """Report ``fd`` again; wakes a waiter at once if input is pending."""
        ...

    def close(self) -> None: ...


class PipeIO(Protocol):
    """A backend: how to wait on a pipe, and whether several threads may take turns reading it."""

    name: str
    shared: bool
    """Whether a waiting caller (parent) or idle session (worker) may read the pipe itself."""

    def poller(self, *fds: int) -> Poller:
        """A poller over ``fds``."""
        ...

    def wakeup(self) -> int:
        """A new wake-up descriptor (shared backends only)."""
        ...

    def wake(self, fd: int) -> None:
        """Make the wake-up descriptor ``fd`` readable."""
        ...

    def drain(self, fd: int) -> None:
        """Make the wake-up descriptor ``fd`` unreadable again."""
        ...


IO_CHOICES = ("auto", "epoll", "portable")

DEFAULT: PipeIO = EpollIO() if hasattr(select, "epoll") and hasattr(os, "eventfd") else PortableIO()


def named(name: str) -> PipeIO:
    """The backend called ``name`` (see ``IO_CHOICES``).

    Raises:
        ValueError: an unknown name, or ``epoll`` where the platform lacks it.
    """
    if name == "auto":
        return DEFAULT
    if name == "portable":
        return PortableIO()
    if name == "epoll" and isinstance(DEFAULT, EpollIO):
        return DEFAULT
    if name == "epoll":
        raise ValueError("worker_io='epoll' needs Linux (epoll and eventfd); use 'auto'")
    raise ValueError(f"worker_io must be one of {', '.join(IO_CHOICES)}; got {name!r}")
