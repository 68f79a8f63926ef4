"""A worker whose parent end cannot be set up is not left behind.

``WorkerClient`` starts the worker process, then makes what it reads the pipe
with: an ``epoll`` object, a duplicated socket and a reader thread. Any of those
can fail once the process runs (``EMFILE`` near the host's file limit, a thread
that cannot start under memory pressure). The worker was then left running for
ever (its pipe stayed open in the parent, so it never saw EOF), with the pipe's
and the process sentinel's descriptors: every failed replacement of a dead
worker leaked one more process.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
from typing import Any

import pytest

from supervisor.workers._client import WorkerClient
from supervisor.workers._io import DEFAULT, PipeIO, Poller
from supervisor.workers._pool import _default_context
from tests.supervisor.host_helpers import WAIT


class _NoPoller:
    """The default pipe backend, but making a poller fails as at the file limit."""

    def __init__(self, io: PipeIO) -> None:
        self._io = io
        self.name = io.name
        self.shared = io.shared

    def poller(self, *fds: int) -> Poller:
        raise OSError(errno.EMFILE, "Too many open files")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._io, name)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _ignore(*_args: object) -> None:
    return None


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_worker_whose_reader_cannot_be_set_up_is_killed_and_its_pipe_closed() -> None:
    context = _default_context()
    warm = WorkerClient(context, _ignore, _ignore)  # the forkserver's own descriptors
    assert warm.wait_ready(WAIT)
    warm.shutdown()
    children_before = {p.pid for p in multiprocessing.active_children()}
    fds_before = _fds()

    with pytest.raises(OSError, match="Too many open files"):
        WorkerClient(context, _ignore, _ignore, io=_NoPoller(DEFAULT))

    left = [p for p in multiprocessing.active_children() if p.pid not in children_before]
    assert left == []  # the worker was killed and reaped, not left serving nobody
    assert _fds() - fds_before == set()  # its pipe and sentinel are closed
