"""The reader thread finding the frame that woke it already read does not kill the worker.

``WorkerClient``'s reader thread waits for the pipe in ``epoll``; a caller waiting
for its reply reads the pipe itself when nobody else does, and leaves the
socket's receive timeout at its last wait slice (a second at most). When a
frame woke the reader thread but a caller took the pipe first and read that
frame, the reader thread then read an empty pipe: after the timeout the read
raised ``BlockingIOError``, the reader thread ended as if it had a bug, and the
healthy worker was killed with every session on it. The reader thread now goes
back to waiting.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from supervisor.workers import _client
from supervisor.workers._client import WorkerClient
from supervisor.workers._io import DEFAULT, PipeIO, Poller
from supervisor.workers._pool import _default_context
from tests.supervisor.host_helpers import WAIT


class _GatedPoller:
    """The reader thread's poller; once ``armed``, its next wake-up waits for ``go``."""

    def __init__(self, inner: Poller) -> None:
        self._inner = inner
        self.armed = False
        self.woke = threading.Event()  # the reader thread was woken and waits for ``go``
        self.go = threading.Event()
        self.polled_again = threading.Event()  # the reader thread waits in ``poll`` again

    def poll(self, timeout: float | None = None) -> list[int]:
        if self.go.is_set():
            self.polled_again.set()
        ready = self._inner.poll(timeout)
        if self.armed and not self.woke.is_set():
            self.woke.set()
            self.go.wait(WAIT)
        return ready

    def pause(self, fd: int) -> None:
        self._inner.pause(fd)

    def resume(self, fd: int) -> None:
        self._inner.resume(fd)

    def close(self) -> None:
        self._inner.close()


class _GatedIO:
    """The default pipe backend, with the reader thread's poller gated."""

    def __init__(self, io: PipeIO) -> None:
        self._io = io
        self.name = io.name
        self.shared = io.shared
        self.poller_made: _GatedPoller | None = None

    def poller(self, *fds: int) -> Poller:
        self.poller_made = _GatedPoller(self._io.poller(*fds))
        return self.poller_made

    def __getattr__(self, name: str) -> Any:
        return getattr(self._io, name)


def _ignore(*_args: object) -> None:
    return None


@pytest.mark.skipif(not DEFAULT.shared, reason="callers read the pipe with the shared backend")
def test_a_frame_a_caller_read_first_leaves_the_reader_thread_and_the_worker_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_client, "_READ_SLICE", 0.05)  # the receive timeout a caller leaves
    io = _GatedIO(DEFAULT)
    client = WorkerClient(_default_context(), _ignore, _ignore, io=io)
    poller = io.poller_made
    assert poller is not None
    try:
        assert client.wait_ready(WAIT)
        poller.armed = True
        reply = client.submit("unload_template", {"key": "nothing"})
        assert poller.woke.wait(WAIT)  # its reply woke the reader thread, which waits
        assert client.wait(reply, WAIT) is None  # this thread reads the reply first

        poller.go.set()  # the reader thread finds nothing to read

        assert poller.polled_again.wait(WAIT)  # it waits for the next frame, as before
        assert client.alive
        assert client.call("unload_template", {"key": "nothing"}, WAIT) is None
    finally:
        poller.go.set()
        client.shutdown()
