"""Who reads a worker's pipe: the caller waiting for its reply, or the reader thread.

A caller reads its own reply when no other thread is reading; other callers
are handed theirs. These tests hold in both modes: answers never cross between
callers, each session's events arrive whole and in order, a subscriber may call
the host for another session on the same worker or read its own session, and a
reply that comes after its caller gave up still lands (its turn and checkpoint
are kept).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors import AgentTemplate, Event
from supervisor import AgentHost, MemoryCheckpointStore
from supervisor.workers._client import _LEAD_LIMIT, WorkerClient
from supervisor.workers._io import DEFAULT
from tests.supervisor.host_helpers import MODES, WAIT, host_options, template, watch_events
from tests.supervisor.workers.worker_tools import FifoModel

CALLERS = 8
SENDS = 60


@pytest.fixture(params=MODES)
def host(request: pytest.FixtureRequest) -> Iterator[AgentHost]:
    """A host whose sessions all share one worker in process mode (one pipe).

    ``process-portable``: as without ``epoll``/``eventfd`` (not Linux), only the
    reader threads read the pipes, on both sides.
    """
    options: dict[str, Any] = host_options(request.param)
    if options:
        options["workers"] = 1
    with AgentHost(MemoryCheckpointStore(), **options) as built:
        yield built


def test_concurrent_callers_get_their_own_answers_and_ordered_events(host: AgentHost) -> None:
    sids = [host.start_session(AgentTemplate()) for _ in range(CALLERS)]
    streams: dict[str, list[Event]] = {sid: [] for sid in sids}
    for sid in sids:
        host.subscribe(sid, streams[sid].append)

    def drive(sid: str) -> list[tuple[str, str | None]]:
        return [(text, host.send(sid, text).content) for text in _texts(sid)]

    with ThreadPoolExecutor(CALLERS) as pool:
        answered = dict(zip(sids, pool.map(drive, sids), strict=True))

    for sid in sids:
        texts = _texts(sid)
        assert answered[sid] == [(text, f"echo: {text}") for text in texts]
        user_turns = [m.content for m in host.history(sid) if m.role == "user"]
        assert user_turns == texts
        stream = streams[sid]
        assert [e.type for e in stream] == ["turn_started", "model_response", "turn_finished"] * (
            SENDS
        )
        started = [e.data for e in stream if e.type == "turn_started"]
        assert started == [{"turn": n, "text": t} for n, t in enumerate(texts, 1)]
        assert [e.seq for e in stream] == sorted(e.seq for e in stream)


def _texts(sid: str) -> list[str]:
    return [f"{sid[:8]} #{n}" for n in range(SENDS)]


def test_a_subscriber_may_call_the_host_for_a_session_on_the_same_worker(
    host: AgentHost,
) -> None:
    """In a worker, subscribers run on the thread reading the pipe; calling the host from
    there reads the pipe further on that thread, instead of waiting on itself."""
    source = host.start_session(AgentTemplate())
    target = host.start_session(AgentTemplate())
    seen: list[object] = []

    def relay(event: Event) -> None:
        if event.type != "turn_finished":
            return
        host.steer(target, "steered from a subscriber")
        seen.append(host.send(target, f"relayed: {event.data['content']}").content)
        seen.append([m.content for m in host.history(target)])
        seen.append(host.checkpoint(target, "from a subscriber").label)

    host.subscribe(source, relay)
    assert host.send(source, "hello", timeout=WAIT).content == "echo: hello"
    relayed = "relayed: echo: hello"
    history = ["steered from a subscriber", relayed, f"echo: {relayed}"]
    assert seen == [history[-1], history, "from a subscriber"]
    assert host.store.load(target).label == "from a subscriber"


def test_a_subscriber_may_read_its_own_sessions_history_and_checkpoint(host: AgentHost) -> None:
    """In thread mode the subscriber runs on the session's own thread, which answers it
    directly; in a worker the session has finished the turn and answers as usual."""
    sid = host.start_session(AgentTemplate())
    seen: list[object] = []

    def own(event: Event) -> None:
        if event.type == "turn_finished":
            seen.append([m.content for m in host.history(sid)])
            seen.append(host.checkpoint(sid, "from its own subscriber").label)

    host.subscribe(sid, own)
    assert host.send(sid, "hello", timeout=WAIT).content == "echo: hello"
    assert seen == [["hello", "echo: hello"], "from its own subscriber"]
    [labelled] = [c for c in host.store.list(sid) if c.label == "from its own subscriber"]
    saved = host.store.load(sid, labelled.checkpoint_id)
    assert [m.content for m in saved.messages()] == ["hello", "echo: hello"]


def test_a_reply_after_its_caller_gave_up_keeps_its_turn_and_checkpoint(
    host: AgentHost, tmp_path: Path
) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    gate = os.open(fifo, os.O_RDWR)  # a writer from the start: the model's open never blocks
    try:
        sid = host.start_session(template(model=FifoModel(str(fifo))))
        with pytest.raises(TimeoutError, match=r"did not answer within 0\.2 s"):
            host.send(sid, "slow", timeout=0.2)
        os.write(gate, b"xx")  # the slow turn goes on, then the next one
        assert host.send(sid, "next", timeout=WAIT).content == "echo: next"
    finally:
        os.close(gate)
    expected = ["slow", "echo: slow", "next", "echo: next"]
    assert [m.content for m in host.history(sid)] == expected
    # The late reply was delivered, and its checkpoint saved, before the next one.
    ids = sorted(c.checkpoint_id for c in host.store.list(sid))  # sortable by time
    saved = [host.store.load(sid, checkpoint_id).messages() for checkpoint_id in ids]
    assert [[m.content for m in messages] for messages in saved[-2:]] == [
        expected[:2],
        expected,
    ]


def test_a_long_turn_does_not_hold_up_other_sessions_of_its_worker(
    host: AgentHost, tmp_path: Path
) -> None:
    """A session that read its own call off the pipe stops reading before it runs it."""
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    gate = os.open(fifo, os.O_RDWR)
    try:
        slow = host.start_session(template(model=FifoModel(str(fifo))))
        quick = host.start_session(AgentTemplate())
        waiter = watch_events(host, slow)
        with ThreadPoolExecutor(1) as pool:
            blocked = pool.submit(host.send, slow, "held")
            waiter.wait_for("turn_started")  # its model now waits on the gate
            for n in range(20):
                assert host.send(quick, f"meanwhile {n}", timeout=WAIT).content == (
                    f"echo: meanwhile {n}"
                )
            assert not blocked.done()
            os.write(gate, b"x")
            assert blocked.result(WAIT).content == "echo: held"
    finally:
        os.close(gate)


@pytest.mark.skipif(not DEFAULT.shared, reason="callers read their replies only with epoll")
def test_a_caller_reads_its_reply_even_when_it_came_before_the_caller_got_to_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``send`` takes the pipe before it writes its request: a caller that loses the
    processor right after writing (here: it stalls until the answer is in the socket,
    where the reader thread would read it were the pipe still in its poll set) still
    reads its answer itself, never handed over by the reader thread."""
    write = WorkerClient._write

    def preempted(client: WorkerClient, data: bytes, future: Any) -> Any:
        reply = write(client, data, future)
        if reply._on_reply is not None:  # a send: stall until its answer waits in the socket
            deadline = time.monotonic() + WAIT
            while not reply.done() and time.monotonic() < deadline:
                if select.select([client._fd], [], [], 0.001)[0] and client._holder is not None:
                    break  # the answer is in, and the pipe is held (by this thread, or not)
        return reply

    with AgentHost(MemoryCheckpointStore(), workers=1) as host:
        sid = host.start_session(AgentTemplate())
        readers: list[int] = []
        host.subscribe(sid, lambda _event: readers.append(threading.get_ident()))
        monkeypatch.setattr(WorkerClient, "_write", preempted)
        assert host.send(sid, "hi", timeout=WAIT).content == "echo: hi"
    assert readers == [threading.get_ident()] * 3  # its events too, on the caller's thread


def test_a_request_too_large_to_take_the_pipe_first_is_answered_too(host: AgentHost) -> None:
    """A request over ``_LEAD_LIMIT`` is written before its caller takes the pipe (its write
    may block, and the reader must stay free meanwhile); its answer still comes back whole."""
    sid = host.start_session(AgentTemplate())
    text = "large " * (_LEAD_LIMIT // 3)  # about twice the limit
    assert host.send(sid, text, timeout=WAIT).content == f"echo: {text}"
    assert host.send(sid, "small", timeout=WAIT).content == "echo: small"


@pytest.mark.skipif(not DEFAULT.shared, reason="idle sessions read their pipes only with epoll")
@pytest.mark.parametrize("stop", ["stop_session", "kill", "hibernate"])
def test_an_idle_session_reading_its_workers_pipe_is_woken_for_its_end(stop: str) -> None:
    """An idle session waits in a read of the pipe that nothing in its worker can end:
    a stop or kill put in its inbox has the host write a ``poke`` frame, which does
    (without it the stop would wait out the worker's 10 s stop timeout)."""
    with AgentHost(MemoryCheckpointStore(), workers=1) as host:
        sid = host.start_session(AgentTemplate())
        assert host.send(sid, "hi").content == "echo: hi"  # then it reads the pipe, idle
        waiter = watch_events(host, sid)
        with ThreadPoolExecutor(1) as pool:
            ended = pool.submit(getattr(host, stop), sid)
            ended.result(WAIT)
        if stop == "stop_session":
            assert sid not in [info.session_id for info in host.list_sessions()]
            return
        if stop == "kill":
            waiter.wait_for("resumed")
        assert host.send(sid, "again", timeout=WAIT).content == "echo: again"
