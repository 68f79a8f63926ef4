"""Hunt 9: a resume right after a session was moved to another node (``lose``) works:
the move forgets the session here (and announces ``moved``) only once its incarnation
has ended, and a resume that comes while it ends waits for that. The record used to be
forgotten first, so a resume found the id free while the supervisor still had the
child, and failed with its ``ChildAlreadyExists``.

The move is what a cluster node does when another node took the session over (private:
a single host has no other node to lose it to).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from actors import Event
from supervisor import AgentHost
from tests.supervisor.host_helpers import (
    WAIT,
    Fifo,
    HostFactory,
    Journal,
    pairs,
    poll_until,
    template,
    watch_events,
)
from tests.supervisor.test_hunt8_restart_stop import HeldRestart


def _waiting(host: AgentHost, call: Future[str]) -> bool:
    """Whether ``call`` is done or waits on the host's table (private: nothing public
    tells that a call waits)."""
    waiters: Any = host._table.changed._waiters  # type: ignore[attr-defined]
    return poll_until(lambda: call.done() or len(waiters) > 0)


def _assert_back(host: AgentHost, sid: str) -> None:
    assert host.send(sid, "again").content == "echo: again"
    assert pairs(host.history(sid)) == [("hello", "echo: hello"), ("again", "echo: again")]
    assert [s.status for s in host.list_sessions()] == ["active"]


def test_a_resume_as_the_move_is_announced_works(make_host: HostFactory, tmp_path: Path) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid = host.start_session(template(journal))
    host.send(sid, "hello")
    resuming: Future[str] = Future()

    def on_moved(event: Event) -> None:
        if event.type == "moved" and not resuming.done():
            started = host.futures.resume(sid, template(journal))
            started.add_done_callback(lambda done: _copy(done, resuming))
            assert _waiting(host, started)

    host.subscribe(sid, on_moved)
    host._sessions.lose_id(sid)

    assert resuming.result(WAIT) == sid  # was ChildAlreadyExists
    _assert_back(host, sid)


def test_a_resume_while_a_move_stops_the_session_waits_for_it(
    make_host: HostFactory, fifo: Fifo, tmp_path: Path
) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid = host.start_session(template(journal, plugins=[HeldRestart(str(fifo.path))]))
    host.send(sid, "hello")
    events = watch_events(host, sid)
    host.kill(sid, reason="test")
    events.wait_for("crashed")
    assert poll_until(lambda: len(journal.of(sid)) == 2)  # its restart is held
    moving = threading.Thread(target=host._sessions.lose_id, args=(sid,))
    moving.start()
    # The move's terminate waits at the supervisor, behind the held restart (private).
    inbox: Any = host._sessions.supervisors.of(sid).actor_ref.actor_inbox
    assert poll_until(lambda: inbox.qsize() > 0)

    resuming = host.futures.resume(sid, template(journal))
    assert _waiting(host, resuming)
    assert not resuming.done()  # it waits for the move to be over here
    fifo.release()
    moving.join(WAIT)

    assert resuming.result(WAIT) == sid
    assert "moved" in events.types()
    _assert_back(host, sid)


def _copy(done: Future[str], target: Future[str]) -> None:
    exc = done.exception()
    if exc is None:
        target.set_result(done.result())
    else:
        target.set_exception(exc)
