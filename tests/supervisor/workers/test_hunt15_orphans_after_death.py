"""Frames of a session left without a deliverer after its worker's death are still delivered.

Found by a bug hunt: ``WorkerClient._orphaned`` did nothing once the worker was dead. The
reader thread delivers what is left at the worker's death (``_deliver_leftovers``), but a
lane another thread was delivering then is skipped, and when that thread stopped early
(an exception out of a frame's delivery: a checkpoint store's ``SystemExit`` on the main
thread, saving a blocking ``send``'s turn) what it left in the lane was never delivered:
the pool's report of the session's death (so the session was never restarted, and
``list_sessions`` showed it active on a dead worker) and the failure of any call written
since (a non-blocking call then waited out its timeout, or, with ``worker_call_timeout``
shorter than it, for ever).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from actors import Snapshot
from supervisor import AgentHost, CheckpointInfo, MemoryCheckpointStore, SessionCrashed
from tests.supervisor.host_helpers import MODES, WAIT, HostFactory, template, watch_events

PROCESS_MODES = MODES[1:]

_ATTEMPTS = 20
"""Sends tried until one's reply is delivered on the main thread (see ``_die_while_saving``)."""


class KillsItsWorker(MemoryCheckpointStore):
    """A memory store whose next ``save`` on the main thread after ``arm(pid)`` kills worker
    ``pid``, waits until the host has buried it (its pipe's reader thread ended), then
    raises ``SystemExit``: the worker dies while the saving thread delivers its session's
    frames. Saves on other threads are kept, and leave it armed."""

    def __init__(self) -> None:
        super().__init__()
        self._pid: int | None = None
        self.buried = threading.Event()

    def arm(self, pid: int) -> None:
        self._pid = pid

    def save(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> CheckpointInfo:
        pid = self._pid
        if pid is None or threading.current_thread() is not threading.main_thread():
            return super().save(snapshot, *args, **kwargs)
        self._pid = None
        reader = next(t for t in threading.enumerate() if t.name.endswith(f"{pid}-reader"))
        os.kill(pid, signal.SIGKILL)
        reader.join(4 * WAIT)
        if not reader.is_alive():
            self.buried.set()
        raise SystemExit("the store gave up")


def _worker_of(host: AgentHost, session_id: str) -> int:
    return next(w.pid for w in host.workers() if session_id in w.sessions)


def _die_while_saving(host: AgentHost, store: KillsItsWorker, sid: str) -> None:
    """Send until a turn's save runs on the main thread (the reply is delivered on the
    caller's thread unless it came before the caller waited for it), where ``store`` kills
    the session's worker and raises ``SystemExit`` once the worker is buried."""
    store.arm(_worker_of(host, sid))
    for attempt in range(_ATTEMPTS):
        try:
            host.send(sid, f"kept {attempt}", timeout=WAIT)
        except SystemExit as exc:
            stopped = exc
            break
    else:
        pytest.fail(f"no save of {_ATTEMPTS} ran on the main thread")
    assert str(stopped) == "the store gave up"
    assert store.buried.is_set(), "the worker's reader thread did not end"


def _users(host: AgentHost, sid: str) -> list[str]:
    return [m.content or "" for m in host.history(sid) if m.role == "user"]


@pytest.mark.parametrize("mode", PROCESS_MODES)
def test_a_session_whose_worker_died_while_its_reply_was_delivered_is_restarted(
    make_host: HostFactory,
) -> None:
    store = KillsItsWorker()
    host = make_host(store=store)
    sid = host.start_session(template())
    waiter = watch_events(host, sid)

    _die_while_saving(host, store, sid)

    # No call of the session's needed: its death is reported, and it is restarted.
    waiter.wait_for("crashed")
    waiter.wait_for("resumed")
    kept = _users(host, sid)
    assert kept == [f"kept {n}" for n in range(len(kept))]  # the last send's turn is not
    assert host.futures.send(sid, "again").result(WAIT).content == "echo: again"


@pytest.mark.parametrize("mode", PROCESS_MODES)
def test_a_call_written_to_the_dead_worker_then_is_answered(make_host: HostFactory) -> None:
    """A non-blocking ``send`` written to the dead worker before the session's death is
    handled: its failure waited in the lane left behind. With ``worker_call_timeout``
    shorter than the call's timeout, nothing else ended it (its deadline only kills the
    worker, dead already): it never resolved."""
    store = KillsItsWorker()
    host = make_host(store=store, worker_call_timeout=WAIT)
    sid = host.start_session(template())
    _die_while_saving(host, store, sid)

    meanwhile = host.futures.send(sid, "meanwhile", timeout=4 * WAIT)

    error = meanwhile.exception(WAIT)  # (raises TimeoutError if it is not resolved by then)
    if error is None:  # it reached the restarted session
        assert meanwhile.result().content == "echo: meanwhile"
    else:  # it reached the dead incarnation: as a turn lost in a crash
        assert isinstance(error, SessionCrashed), repr(error)
    assert host.send(sid, "again", timeout=WAIT).content == "echo: again"
