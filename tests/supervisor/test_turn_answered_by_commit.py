"""A session whose turn's save queues behind another batch does not wait for it on its
thread (``actors._later``): the thread that commits the batch publishes the turn's
``turn_finished`` and answers the caller, once the checkpoint is durable; a batch that
fails answers each caller with the store's error, and each session rolls its turn back on
its own thread before it takes its next message."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from actors import Event, Message
from supervisor import AgentHost, StoreFull, tune_interpreter
from tests.supervisor.host_helpers import WAIT, assert_threads_back, poll_until, template
from tests.supervisor.test_group_commit import _writer_held

SESSIONS = 6


@pytest.fixture
def host(tmp_path: Path) -> Iterator[AgentHost]:
    before = list(threading.enumerate())
    with AgentHost(data_dir=tmp_path / "data") as running:
        yield running
    assert_threads_back(before)


def _queued_behind_a_waiting_leader(
    host: AgentHost, sids: list[str], text: str = "hello {}"
) -> list[Future[Message]]:
    """Send ``text`` (naming the session) to every session of ``sids`` while another
    connection holds the store's write lock: the first save to come leads and waits in
    ``BEGIN``; the others queue behind it. Returns (the lock still held) once they all
    queued: the sends' futures."""
    store: Any = host.store
    futures = [host.futures.send(sid, text.format(sid)) for sid in sids]
    assert poll_until(lambda: len(store._commits._queued) == len(sids) - 1)
    return futures


def test_answers_come_once_durable_and_turn_finished_after_the_commit(
    host: AgentHost, tmp_path: Path
) -> None:
    sids = [host.start_session(template()) for _ in range(SESSIONS)]
    store: Any = host.store
    seen: dict[str, list[str]] = {sid: [] for sid in sids}
    publishers: dict[str, str] = {}

    def stored_answer(sid: str) -> list[str]:
        return [m["content"] for m in store.load(sid).state["messages"]][-1:]

    def on_event(sid: str) -> Any:
        def subscriber(event: Event) -> None:
            if event.type == "turn_finished":  # published only once its save is durable
                seen[sid] = stored_answer(sid)
                publishers[sid] = threading.current_thread().name

        return subscriber

    for sid in sids:  # a quick watcher (as an event stream's) lets the session go on
        host.futures.watch(sid, on_event(sid), lambda: None)
    with _writer_held(Path(store.path)):
        futures = _queued_behind_a_waiting_leader(host, sids)
        assert not any(f.done() for f in futures)  # none answered before its commit
    answers = [f.result(WAIT) for f in futures]
    assert [a.content for a in answers] == [f"echo: hello {sid}" for sid in sids]
    for sid, answer in zip(sids, answers, strict=True):
        assert stored_answer(sid) == [answer.content]
        assert seen[sid] == [answer.content]
        assert [m.content for m in host.history(sid)][-1] == answer.content
    # the first save led its own batch; the sessions queued behind it did not wait: the
    # store's own thread committed their batch and finished their turns
    assert sorted(publishers.values()).count("sessionvisor-commit") == SESSIONS - 1
    # the sessions go on: their next turns
    assert host.send(sids[1], "again").content == "echo: again"


def test_a_failed_batch_fails_every_send_and_each_session_rolls_its_turn_back(
    host: AgentHost,
) -> None:
    sids = [host.start_session(template()) for _ in range(SESSIONS)]
    for sid in sids:
        host.send(sid, "first")
    store: Any = host.store
    conn: sqlite3.Connection = store._conn
    errors: dict[str, list[str]] = {sid: [] for sid in sids}

    def on_error(sid: str) -> Any:
        def subscriber(event: Event) -> None:
            if event.type == "error":
                errors[sid].append(event.data["error"])

        return subscriber

    for sid in sids:
        host.futures.watch(sid, on_error(sid), lambda: None)
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")  # as a full disk: SQLITE_FULL
    with _writer_held(Path(store.path)):  # each turn's save needs pages of its own
        futures = _queued_behind_a_waiting_leader(host, sids, "{} " + "x" * 20_000)
    for future in futures:
        error = future.exception(WAIT)
        assert isinstance(error, StoreFull)
        assert "is full (database or disk is full): nothing of this write was stored" in str(error)
    conn.execute("PRAGMA max_page_count = 1073741823")
    for sid in sids:
        # rolled back on the session's thread before it answered: the failed turn is gone
        assert [m.content for m in host.history(sid)] == ["first", "echo: first"]
        assert len(errors[sid]) == 1
        assert errors[sid][0].startswith("StoreFull(")
        assert host.session_info(sid).status == "active"  # the session lives on
    assert host.send(sids[0], "after").content == "echo: after"
    assert [m["content"] for m in store.load(sids[0]).state["messages"]] == [
        "first",
        "echo: first",
        "after",
        "echo: after",
    ]


def test_a_message_that_comes_before_the_commit_waits_for_it(host: AgentHost) -> None:
    sids = [host.start_session(template()) for _ in range(2)]
    store: Any = host.store
    with _writer_held(Path(store.path)):
        futures = _queued_behind_a_waiting_leader(host, sids)
        history = host.futures.history(sids[1])  # a session whose save is queued
        assert not history.done()  # its thread waits for the save's outcome first
    assert [f.result(WAIT).content for f in futures] == [f"echo: hello {s}" for s in sids]
    assert [m.content for m in history.result(WAIT)] == [
        f"hello {sids[1]}",
        f"echo: hello {sids[1]}",
    ]


def test_a_burst_of_turns_in_a_tuned_process_keeps_every_answer(host: AgentHost) -> None:
    previous = tune_interpreter()
    try:
        sids = [host.start_session(template()) for _ in range(100)]
        futures = [host.futures.send(sid, "burst") for sid in sids]
        assert all(f.result(WAIT).content == "echo: burst" for f in futures)
    finally:
        tune_interpreter(previous)
    store: Any = host.store
    for sid in sids:
        assert [m["content"] for m in store.load(sid).state["messages"]] == ["burst", "echo: burst"]


def test_a_session_with_a_subscriber_of_its_own_waits_for_its_save_as_before(
    host: AgentHost,
) -> None:
    """``AgentHost.subscribe``'s subscriber may block, call the host (for its own session
    too) or raise ``SystemExit`` on the session's thread: a session that has one saves on
    its thread, and its ``turn_finished`` comes there; a subscriber that sends to another
    session and reads a third's history, queued in the same batch, is answered."""
    sids = [host.start_session(template()) for _ in range(3)]
    relay = host.start_session(template())
    relayed: dict[str, tuple[str, int, str]] = {}
    done = threading.Event()

    def on_event(sid: str) -> Any:
        def subscriber(event: Event) -> None:
            if event.type == "turn_finished" and sid != sids[0]:
                answer = host.send(relay, f"from {sid}").content or ""
                thread = threading.current_thread().name
                relayed[sid] = (answer, len(host.history(sids[0])), thread)
                if len(relayed) == len(sids) - 1:
                    done.set()

        return subscriber

    for sid in sids:
        host.subscribe(sid, on_event(sid))
    store: Any = host.store
    with _writer_held(Path(store.path)):
        futures = _queued_behind_a_waiting_leader(host, sids)
    assert [f.result(WAIT).content for f in futures] == [f"echo: hello {s}" for s in sids]
    assert done.wait(WAIT)
    assert {sid: r[:2] for sid, r in relayed.items()} == {
        sid: (f"echo: from {sid}", 2) for sid in sids[1:]
    }
    assert not [r for r in relayed.values() if r[2] == "sessionvisor-commit"]
    assert len(host.history(relay)) == 4
