"""A done-callback that raises ``SystemExit`` (or another ``BaseException`` that is not an
``Exception``, which ``concurrent.futures`` lets through) runs on the thread completing
the call: it must not take that thread down. It used to crash the session (thread
mode: it reached the actor's loop) or end the thread reading the worker's pipe
(process mode: every later call to that worker's sessions timed out, then the worker
was killed and all of them crashed). The timer and helper threads were already immune."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

import pytest

from actors import Message
from tests.supervisor.host_helpers import WAIT, Fifo, HostFactory, template
from tests.supervisor.workers.worker_tools import FifoModel


def test_a_done_callback_raising_system_exit_harms_no_session(
    make_host: HostFactory, caplog: pytest.LogCaptureFixture, fifo: Fifo
) -> None:
    host = make_host()
    # The model waits for the fifo: the callback is added while the call is under way, so
    # it runs on the thread that completes it (added to a done future, it would run here).
    sid = host.start_session(template(model=FifoModel(str(fifo.path))))
    neighbour = host.start_session(template())
    cursor = host.events(sid).cursor
    called = threading.Event()
    ran_on: list[threading.Thread] = []

    def leave(_: Future[Message]) -> None:
        ran_on.append(threading.current_thread())
        called.set()
        raise SystemExit(9)

    first = host.futures.send(sid, "one")
    first.add_done_callback(leave)
    fifo.release(2)  # this call's model, and the next one's
    assert first.result(WAIT).content == "echo: one"
    assert called.wait(WAIT)
    assert ran_on != [threading.current_thread()]
    assert host.futures.send(sid, "two", timeout=WAIT).result(WAIT).content == "echo: two"
    assert host.send(neighbour, "hi", timeout=WAIT).content == "echo: hi"
    assert "crashed" not in [e.type for e in host.events(sid, since=cursor).events]
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]
    assert any(isinstance(r.exc_info[1], SystemExit) for r in logged if r.exc_info)
