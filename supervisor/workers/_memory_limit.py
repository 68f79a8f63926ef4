"""A worker's ``worker_memory_limit``: applied so that sessions fit, and explained when they
do not.

The limit is ``RLIMIT_AS``, the process's address space, which counts what is
reserved, not what is used. Each session in a worker runs on a thread of its own,
and a thread reserves its whole stack (8 MiB by default on Linux) and, with glibc,
a malloc arena of 64 MiB for itself, up to eight arenas per core: on two cores a
limit of 512 MiB held five sessions. A limited worker therefore keeps two arenas
(``M_ARENA_MAX``; threads share them, as glibc's ``MALLOC_ARENA_MAX=2`` makes them
share), and a thread that still cannot start fails the start with a message saying
which limit ran out and what to do. A ``MemoryError`` in a tool ends the whole worker
with ``MEMORY_EXIT`` (``fatal_on_memory_error``): past its memory limit a process is in
no state to go on, and the parent resumes its sessions elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["MEMORY_EXIT", "apply_memory_limit", "explained", "fatal_on_memory_error"]

MEMORY_EXIT = 75
"""Exit code of a worker that ran out of memory (a tool raised ``MemoryError``)."""

_M_ARENA_MAX = -8
"""``mallopt``'s parameter number of ``M_ARENA_MAX`` (glibc's ``malloc.h``)."""

_ARENAS = 2
"""Malloc arenas a limited worker keeps (glibc's own default: eight per core)."""

_NO_THREAD = "can't start new thread"
"""The text of the ``RuntimeError`` Python raises when a thread cannot be created."""


def apply_memory_limit(limit: int) -> None:
    """Cap this process's address space at ``limit`` bytes, with ``_ARENAS`` malloc arenas
    (on glibc; elsewhere the limit alone)."""
    import resource  # noqa: PLC0415 (POSIX only; imported where it is needed)

    if _glibc():
        with contextlib.suppress(OSError, AttributeError):  # an unusual libc: the limit alone
            ctypes.CDLL(None).mallopt(_M_ARENA_MAX, _ARENAS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def explained(error: BaseException, limit: int | None) -> BaseException:
    """``error``, or for a thread that could not start under ``limit`` a ``RuntimeError``
    saying why and what to do (``error`` is its cause)."""
    if limit is None or not isinstance(error, RuntimeError) or str(error) != _NO_THREAD:
        return error
    stack = threading.stack_size() or _default_stack()
    better = RuntimeError(
        f"{_NO_THREAD} in worker process pid {os.getpid()}: its worker_memory_limit={limit} "
        f"bytes ({limit / 2**20:.0f} MiB) is used up. The limit is address space "
        f"(RLIMIT_AS), not resident memory, and each session in a worker runs on a thread "
        f"of its own that reserves its stack ({stack / 2**20:.0f} MiB) and a share of the "
        f"allocator's arenas: raise worker_memory_limit (it is in bytes), run more "
        f"workers, or hibernate idle sessions (hibernate_after_ms)"
    )
    better.__cause__ = error
    return better


def fatal_on_memory_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a tool's function), ending the worker process with ``MEMORY_EXIT`` if it
    raises ``MemoryError``: the parent reports the worker's death as out of memory."""

    @functools.wraps(fn)
    def run(**arguments: Any) -> Any:
        try:
            return fn(**arguments)
        except MemoryError:
            os._exit(MEMORY_EXIT)

    return run


def _glibc() -> bool:
    """Whether this process runs on glibc (whose ``mallopt`` takes ``M_ARENA_MAX``)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):  # no such name here: not glibc
        return False


def _default_stack() -> int:
    """The stack a new thread reserves here: the soft ``RLIMIT_STACK`` (glibc's default for
    threads), or 2 MiB (glibc's own on x86-64) when it is unlimited."""
    import resource  # noqa: PLC0415 (POSIX only)

    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    return soft if 0 < soft != resource.RLIM_INFINITY else 2 * 2**20
