"""``AgentHost(parked_threads=)``: in thread mode, a session started after another ended
runs on that session's parked thread instead of a new one; ``0`` ends each session's
thread with it; a shutdown ends the parked ones; a call from a reused thread to the
incarnation that ran there before is not answered by that ended incarnation."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from actors import AgentSession, AgentTemplate, EchoModel, GetHistory
from supervisor import AgentHost, MemoryCheckpointStore, supervised_class
from supervisor._lifecycle import lifecycle_of
from supervisor._runtime import NotDelivered
from supervisor._session_threads import PARKED_NAME, SessionThreads
from supervisor._thread_runtime import ThreadRuntime
from tests.supervisor.host_helpers import (
    WAIT,
    Journal,
    assert_threads_back,
    pairs,
    poll_until,
    session_thread_gone,
    template,
)


def _parked() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == PARKED_NAME]


def _thread_of(journal: Journal, session_id: str) -> int:
    return journal.of(session_id)[-1].native_id


def test_a_session_started_after_another_ended_runs_on_its_thread(tmp_path: Any) -> None:
    before = set(threading.enumerate())
    journal = Journal(tmp_path)
    with AgentHost(store=MemoryCheckpointStore(), auto_hibernate=False) as host:
        host.start_session(template(journal), "a")
        assert host.hibernate("a")
        assert poll_until(lambda: len(_parked()) == 1)
        count = threading.active_count()

        host.start_session(template(journal), "b")
        assert _thread_of(journal, "b") == _thread_of(journal, "a")
        assert threading.active_count() == count
        assert not _parked()
        assert host.send("a", "back").content == "echo: back"  # reactivated: a thread anew
        assert host.send("b", "hi").content == "echo: hi"
        assert _thread_of(journal, "a") != _thread_of(journal, "b")
        assert pairs(host.history("b")) == [("hi", "echo: hi")]
    assert_threads_back(before)  # the shutdown ended the parked threads too


def test_parked_threads_are_bounded_by_the_option(tmp_path: Any) -> None:
    journal = Journal(tmp_path)
    with AgentHost(store=MemoryCheckpointStore(), parked_threads=2, auto_hibernate=False) as host:
        ids = [host.start_session(template(journal), f"s{i}") for i in range(5)]
        for sid in ids:
            assert host.hibernate(sid)
        assert poll_until(lambda: len(_parked()) == 2)
        ran = {_thread_of(journal, sid) for sid in ids}
        assert len(ran) == 5
        assert all(session_thread_gone(journal, sid) for sid in ids)
        # Of the five threads, the two parked ones are left; the others ended.
        assert poll_until(lambda: len(ran & {t.native_id for t in threading.enumerate()}) == 2)
        assert {t.native_id for t in _parked()} <= ran


def test_none_parked_ends_a_sessions_thread_with_it(tmp_path: Any) -> None:
    before = set(threading.enumerate())
    journal = Journal(tmp_path)
    with AgentHost(store=MemoryCheckpointStore(), parked_threads=0, auto_hibernate=False) as host:
        with_host = set(threading.enumerate())
        host.start_session(template(journal), "a")
        assert host.hibernate("a")
        assert session_thread_gone(journal, "a")
        assert_threads_back(with_host)  # ended, not parked
        host.start_session(template(journal), "b")
        assert host.send("b", "hi").content == "echo: hi"
        assert host.hibernate("b")
        assert_threads_back(with_host)
    assert_threads_back(before)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (
            -1,
            ValueError,
            r"parked_threads must be >= 0 \(0: a session's thread ends with it\), got -1",
        ),
        ("8", TypeError, "parked_threads must be an int, got str '8'"),
        (True, TypeError, "parked_threads must be an int, got bool True"),
    ],
)
def test_a_bad_parked_threads_is_refused_before_anything_starts(
    value: object, error: type[Exception], message: str, tmp_path: Any
) -> None:
    before = set(threading.enumerate())
    with pytest.raises(error, match=message):
        AgentHost(data_dir=tmp_path / "data", parked_threads=value)  # type: ignore[arg-type]
    assert not (tmp_path / "data").exists()
    assert_threads_back(before)


class _Probe:
    """What a call to an ended incarnation, made on the thread it ran on, came to."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outcome: object = None
        self.same_thread = False


def test_a_call_from_a_reused_thread_is_not_answered_by_the_ended_incarnation() -> None:
    threads = SessionThreads(most_parked=1)
    session_class: type[AgentSession] = type(
        "ParkedSession", (supervised_class(AgentSession),), {"_sv_threads": threads}
    )
    ended = session_class.start(AgentTemplate(model=EchoModel()), session_id="ended")
    ended.stop()
    assert poll_until(lambda: threads.parked == 1)
    runtime, probe = ThreadRuntime(threads), _Probe()
    lifecycle = lifecycle_of(ended)
    assert lifecycle is not None
    ran_on = lifecycle.thread

    def call_the_ended_one() -> None:
        probe.same_thread = threading.get_ident() == ran_on
        try:
            probe.outcome = runtime.call("ended", ended, GetHistory(), WAIT)
        except NotDelivered as exc:
            probe.outcome = exc
        finally:
            probe.done.set()

    threads.run(call_the_ended_one, "probe")
    assert probe.done.wait(WAIT)
    assert probe.same_thread
    assert isinstance(probe.outcome, NotDelivered), probe.outcome
    threads.close(WAIT)
