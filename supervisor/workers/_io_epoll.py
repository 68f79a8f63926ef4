"""The Linux pipe backend: ``epoll`` sets and ``eventfd`` wake-ups (see ``_io``)."""

from __future__ import annotations

import contextlib
import os
import select

__all__ = ["EpollIO"]


class _EpollSet:
    """An ``epoll`` set over some descriptors; another thread may pause or resume one
    while a thread waits in ``poll`` (level-triggered: resuming a descriptor with input
    pending wakes the waiter). Thread-safe as ``epoll`` is."""

    __slots__ = ("_epoll",)

    def __init__(self, fds: tuple[int, ...]) -> None:
        self._epoll = select.epoll()
        for fd in fds:
            self._epoll.register(fd, select.EPOLLIN)

    def poll(self, timeout: float | None = None) -> list[int]:
        return [fd for fd, _ in self._epoll.poll(-1 if timeout is None else timeout)]

    def pause(self, fd: int) -> None:
        self._epoll.modify(fd, 0)

    def resume(self, fd: int) -> None:
        self._epoll.modify(fd, select.EPOLLIN)

    def close(self) -> None:
        self._epoll.close()


class EpollIO:
    """Shared reading: callers and idle sessions take turns on a pipe. Thread-safe (stateless)."""

    name = "epoll"
    shared = True

    def poller(self, *fds: int) -> _EpollSet:
        return _EpollSet(fds)

    def wakeup(self) -> int:
        return os.eventfd(0, os.EFD_NONBLOCK)

    def wake(self, fd: int) -> None:
        os.eventfd_write(fd, 1)

    def drain(self, fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(fd)
