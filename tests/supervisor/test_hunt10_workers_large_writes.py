"""A large request being written to a worker does not hold up the replies coming back.

``WorkerClient`` wrote every request while holding the lock that the thread
reading the pipe takes to hand a reply to its caller. A request larger than the
socket's buffer (a long prompt, a pasted document) is written only as fast as
the worker reads it, and the worker stops reading while its own write waits
(a steer's reply, a session's answer, when the host has not read what the worker
wrote). The host then stopped reading too: every session of that worker hung for
good (seen with four sessions sending 8 MiB prompts, steering and reading
histories together). The lock now guards the table of calls only; writes have
their own.
"""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import termios
import threading
from typing import Any

from supervisor.workers._client import WorkerClient
from supervisor.workers._pool import _default_context
from tests.supervisor.host_helpers import WAIT, poll_until

_BIG = 8 * 1024 * 1024
"""Far more than a socket pair's buffer: its write blocks while the worker does not read."""


def _unsent(client: WorkerClient) -> int:
    """Bytes this end wrote to the pipe that the worker has not read yet."""
    out = fcntl.ioctl(client._conn.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    (count,) = struct.unpack("i", out)
    return int(count)


def test_a_reply_reaches_its_caller_while_a_large_request_waits_to_be_written() -> None:
    entered, go = threading.Event(), threading.Event()

    def on_push(_client: WorkerClient, frame: dict[str, Any]) -> None:
        if frame.get("op") == "ready":  # the reader thread waits here: replies pile up
            entered.set()
            go.wait(WAIT)

    client = WorkerClient(_default_context(), on_push, lambda _client: None)
    writer: threading.Thread | None = None
    stopped = False
    try:
        assert entered.wait(WAIT)
        small = client.submit("unload_template", {"key": "nothing"})
        assert client._conn.poll(WAIT)  # its reply is in, unread
        assert client.pid is not None
        os.kill(client.pid, signal.SIGSTOP)  # the worker reads nothing from now on
        stopped = True
        big = {"session": "nobody", "text": "x" * _BIG}
        writer = threading.Thread(target=client.submit, args=("steer", big), daemon=True)
        writer.start()
        assert poll_until(lambda: _unsent(client) > 0)  # the large request is being written

        go.set()  # the reader thread reads the small request's reply now

        assert small.result(WAIT) is None
    finally:
        go.set()
        if stopped and client.pid is not None:
            os.kill(client.pid, signal.SIGCONT)
        if writer is not None:
            writer.join(WAIT)
        client.shutdown()
