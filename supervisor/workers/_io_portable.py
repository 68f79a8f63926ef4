"""The portable pipe backend: plain ``poll``; only reader threads read pipes (see ``_io``)."""

from __future__ import annotations

import math
import select

__all__ = ["PortableIO"]


class _PollSet:
    """A ``poll`` set over some descriptors, waited on by one thread."""

    __slots__ = ("_poll",)

    def __init__(self, fds: tuple[int, ...]) -> None:
        self._poll = select.poll()
        for fd in fds:
            self._poll.register(fd, select.POLLIN)

    def poll(self, timeout: float | None = None) -> list[int]:
        wait = None if timeout is None else math.ceil(timeout * 1000)
        return [fd for fd, _ in self._poll.poll(wait)]

    def pause(self, fd: int) -> None:
        raise RuntimeError("the portable pipe backend has one reader per pipe")

    resume = pause

    def close(self) -> None:
        """Nothing to release."""


class PortableIO:
    """One reader thread per pipe end. Thread-safe (stateless)."""

    name = "portable"
    shared = False

    def poller(self, *fds: int) -> _PollSet:
        return _PollSet(fds)

    def wakeup(self) -> int:
        raise RuntimeError("the portable pipe backend needs no wake-ups")

    def wake(self, fd: int) -> None:
        raise RuntimeError("the portable pipe backend needs no wake-ups")

    drain = wake
