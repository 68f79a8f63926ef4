"""``host.futures``: the host's calls in non-blocking form, in every mode.

They keep the blocking calls' semantics (order per session, one retry when a
call never reached a live incarnation, the same error types, a durable turn
before the answer) without a thread per call in flight.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from actors import EchoModel, Message, ModelResponse, Plugin, PluginContext, Tool
from supervisor import (
    AgentHost,
    MemoryCheckpointStore,
    SessionCrashed,
    SessionNotFound,
    SQLiteCheckpointStore,
    WorkerCrashed,
    tune_interpreter,
)
from supervisor._gate import Ticket
from supervisor._nonblocking import HELPERS, _Exclusive
from tests.supervisor.host_helpers import (
    WAIT,
    CyclicGarbage,
    Fifo,
    FlakyModel,
    HostFactory,
    ModelDown,
    assert_threads_back,
    host_options,
    pairs,
    poll_until,
    same_error,
    template,
    watch_events,
)
from tests.supervisor.workers.worker_tools import FifoModel, worker_pid


class SleepyModel(EchoModel):
    """``EchoModel`` that takes ``seconds`` per call, like a remote model (its latency is
    the workload, not a synchronisation). Picklable: usable in worker processes."""

    model_string = "sleepy-echo"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        threading.Event().wait(self.seconds)
        return super().generate(messages, tools)


def held_session(host: AgentHost, fifo: Fifo) -> str:
    """A session whose model waits for ``fifo.release`` at every call."""
    return host.start_session(template(model=FifoModel(str(fifo.path))))


def test_send_answers_after_the_turn_is_checkpointed(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())
    future = host.futures.send(sid, "hello")
    assert isinstance(future, Future)
    assert future.result(WAIT).content == "echo: hello"
    assert pairs(host.store.load(sid).messages()) == [("hello", "echo: hello")]


def test_calls_to_one_session_run_in_the_order_they_were_made(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())
    futures = [host.futures.send(sid, f"m{n}") for n in range(30)]
    stop = host.futures.stop_session(sid)  # queued behind the sends
    assert [f.result(WAIT).content for f in futures] == [f"echo: m{n}" for n in range(30)]
    stop.result(WAIT)
    assert [text for text, _ in pairs(host.store.load(sid).messages())] == [
        f"m{n}" for n in range(30)
    ]


def test_blocking_and_non_blocking_calls_share_one_queue(
    make_host: HostFactory, fifo: Fifo
) -> None:
    host = make_host()
    sid = held_session(host, fifo)
    waiter = watch_events(host, sid)
    gate = host._table.live(sid).op_lock  # to see the blocking caller queue
    first = host.futures.send(sid, "first")
    waiter.wait_for("turn_started")
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(host.send, sid, "second")
        assert poll_until(lambda: gate.queued == 1)  # the blocking caller waits in the queue
        third = host.futures.send(sid, "third")
        fifo.release(3)
        assert [f.result(WAIT).content for f in (first, second, third)] == [
            "echo: first",
            "echo: second",
            "echo: third",
        ]
    assert [text for text, _ in pairs(host.history(sid))] == ["first", "second", "third"]


def test_cancel_withdraws_a_queued_call_only(make_host: HostFactory, fifo: Fifo) -> None:
    host = make_host()
    sid = held_session(host, fifo)
    waiter = watch_events(host, sid)
    running = host.futures.send(sid, "running")
    waiter.wait_for("turn_started")
    queued = host.futures.send(sid, "queued")
    after = host.futures.send(sid, "after")
    gate = host._table.live(sid).op_lock
    assert gate.queued == 2
    assert not running.cancel()  # started: it runs to its end
    assert queued.cancel()
    assert gate.queued == 1  # it left the session's queue at once, not when its turn came
    fifo.release(2)
    assert running.result(WAIT).content == "echo: running"
    assert after.result(WAIT).content == "echo: after"
    with pytest.raises(CancelledError):
        queued.result(0)
    assert [text for text, _ in pairs(host.store.load(sid).messages())] == ["running", "after"]


def test_finished_and_cancelled_calls_leave_no_garbage_cycle(fifo: Fifo) -> None:
    """A call's future, its place in the session's queue and the call itself are freed when
    the call ends, not left as cyclic garbage: a turn outlives young collections, so such
    garbage waited for a full collection (17 objects a call)."""
    with AgentHost(store=MemoryCheckpointStore()) as host:
        sid = held_session(host, fifo)
        waiter = watch_events(host, sid)
        fifo.release(1)
        host.futures.send(sid, "warm").result(WAIT)
        with CyclicGarbage(_CALL_PARTS) as garbage:
            running = host.futures.send(sid, "running")
            waiter.wait_for("turn_started", count=2)  # after the warm-up turn's
            cancelled = host.futures.send(sid, "cancelled")
            queued = [host.futures.send(sid, f"m{n}") for n in range(5)]
            assert cancelled.cancel()
            fifo.release(6)
            answers = [f.result(WAIT).content for f in (running, *queued)]
            del running, cancelled, queued
    assert answers == ["echo: running", *(f"echo: m{n}" for n in range(5))]
    assert garbage.names == []


_CALL_PARTS = (Future, Ticket, _Exclusive)


def test_a_timeout_fails_the_future_and_the_turn_still_completes_durably(
    make_host: HostFactory, fifo: Fifo
) -> None:
    host = make_host()
    sid = held_session(host, fifo)
    waiter = watch_events(host, sid)
    slow = host.futures.send(sid, "slow", timeout=0.2)
    waiter.wait_for("turn_started")
    queued = host.futures.send(sid, "queued", timeout=0.1)  # the gate stays busy for it
    with pytest.raises(TimeoutError, match="stayed busy"):
        queued.result(WAIT)
    with pytest.raises(TimeoutError, match=r"did not answer within 0\.2 s"):
        slow.result(WAIT)
    fifo.release()
    waiter.wait_for("turn_finished")
    assert host.futures.history(sid).result(WAIT)[-1].content == "echo: slow"
    following = host.futures.send(sid, "next")  # the timed-out "queued" never ran
    fifo.release()
    assert following.result(WAIT).content == "echo: next"
    assert [text for text, _ in pairs(host.store.load(sid).messages())] == ["slow", "next"]


def test_errors_reach_the_future_with_their_types(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(model=FlakyModel()))
    failed = host.futures.send(sid, "!fail now")
    assert same_error(failed.exception(WAIT), ModelDown)
    assert host.futures.send(sid, "fine").result(WAIT).content == "echo: fine"  # lives on
    missing = host.futures.send("nobody", "hi")
    assert isinstance(missing.exception(WAIT), SessionNotFound)
    other_tenant = host.futures.history(sid, tenant_id="someone-else")
    assert isinstance(other_tenant.exception(WAIT), SessionNotFound)
    with pytest.raises(TypeError, match="as a str"):
        host.futures.send(sid, b"bytes")  # type: ignore[arg-type]
    crashed = host.futures.send(sid, "/exit_tool {}")
    assert isinstance(crashed.exception(WAIT), SessionCrashed)
    assert host.futures.send(sid, "back").result(WAIT).content == "echo: back"


def test_a_killed_session_takes_the_call_in_its_next_incarnation(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())
    assert host.futures.send(sid, "one").result(WAIT).content == "echo: one"
    host.kill(sid)
    assert host.futures.send(sid, "two").result(WAIT).content == "echo: two"
    assert [t for t, _ in pairs(host.history(sid))] == ["one", "two"]


def test_a_hibernated_session_is_reactivated_by_a_non_blocking_send(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sid = host.start_session(template())
    host.send(sid, "before")
    assert host.futures.hibernate(sid).result(WAIT)
    history = host.futures.history(sid).result(WAIT)  # from the checkpoint
    assert [t for t, _ in pairs(history)] == ["before"]
    snapshot = host.futures.checkpoint(sid, "asleep").result(WAIT)
    assert snapshot.label == "asleep"
    assert host.futures.send(sid, "after").result(WAIT).content == "echo: after"
    assert host.list_sessions()[0].status == "active"
    assert host.futures.checkpoint(sid, "awake").result(WAIT).label == "awake"
    assert host.store.load(sid).label == "awake"


def test_lifecycle_calls_in_non_blocking_form(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.futures.start_session(template(), "s1").result(WAIT)
    host.futures.send(sid, "hello").result(WAIT)
    host.futures.steer(sid, "be brief").result(WAIT)
    host.futures.stop_session(sid).result(WAIT)
    assert isinstance(host.futures.send(sid, "gone").exception(WAIT), SessionNotFound)
    assert host.futures.resume(sid, template()).result(WAIT) == sid
    assert [t for t, _ in pairs(host.futures.history(sid).result(WAIT))] == ["hello"]


def test_futures_left_at_shutdown_fail_and_no_thread_is_left(mode: str, fifo: Fifo) -> None:
    before = set(threading.enumerate())
    host = AgentHost(store=MemoryCheckpointStore(), call_timeout=WAIT, **host_options(mode))
    sid = held_session(host, fifo)
    waiter = watch_events(host, sid)
    running = host.futures.send(sid, "running")
    waiter.wait_for("turn_started")
    queued = [host.futures.send(sid, f"q{n}") for n in range(3)]
    fifo.release(4)  # the running turn ends; the shutdown races the queued ones
    host.shutdown()
    assert running.result(WAIT).content == "echo: running"
    for future in queued:  # each ran, or failed as the host went away: none is left hanging
        outcome = future.exception(WAIT)
        assert outcome is None or isinstance(outcome, (RuntimeError, SessionNotFound)), outcome
    late = host.futures.send(sid, "late").exception(WAIT)
    assert isinstance(late, (RuntimeError, SessionNotFound))
    assert_threads_back(before)


@pytest.fixture
def tuned() -> Iterator[None]:
    """The interpreter tuned as the README advises for thousands of sessions, then restored."""
    thresholds = gc.get_threshold()
    previous = tune_interpreter()
    yield
    tune_interpreter(previous)
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("tuned")
def test_thousands_of_sends_in_flight_hold_no_caller_thread(
    mode: str, make_host: HostFactory, tmp_path: Path
) -> None:
    """Issue 14: 3,000 concurrent non-blocking sends (500 in worker mode, where every
    session's start is a round trip to a worker) to a model that takes 200 ms complete,
    every answer is in its session's checkpoint (SQLite), and the host's thread
    count stays bounded: one thread per active session (its actor, or its proxy in worker
    mode), plus the call timer and at most ``HELPERS`` helpers; none per call in flight.
    Tuned as the README says a host of thousands of sessions must be: at Python's 5 ms
    switch interval the 3,000 threads at times thrash for a minute (``supervisor.tuning``)."""
    count = 3000 if mode == "thread" else 500
    # synchronous=NORMAL: 3,000 fsyncs one after the other would be most of this test's
    # time (group commit is issue 14's other part); what is checked here is the same.
    host = make_host(store=SQLiteCheckpointStore(tmp_path / "cp.db", synchronous="NORMAL"))
    model = SleepyModel(0.2)
    sids = [host.start_session(template(model=model)) for _ in range(count)]
    idle = threading.active_count()
    peak = [idle]

    def sample(_: Future[Message]) -> None:
        peak[0] = max(peak[0], threading.active_count())

    futures = [host.futures.send(sid, f"hello {sid}") for sid in sids]
    in_flight = threading.active_count()
    for future in futures:
        future.add_done_callback(sample)
    _, pending = wait(futures, timeout=120)  # a backstop: about 10 s here
    assert not pending
    for sid, future in zip(sids, futures, strict=True):
        assert future.result().content == f"echo: hello {sid}"
    assert max(in_flight, peak[0]) - idle <= 1 + HELPERS
    for sid in sids:
        assert pairs(host.store.load(sid).messages()) == [(f"hello {sid}", f"echo: hello {sid}")]


@pytest.mark.parametrize("mode", ["process", "process-portable"])
def test_a_worker_dying_under_a_call_fails_it_and_the_queued_ones_go_on(
    fifo: Fifo, make_host: HostFactory
) -> None:
    host = make_host()
    sid = held_session(host, fifo)
    waiter = watch_events(host, sid)
    running = host.futures.send(sid, "running")
    waiter.wait_for("turn_started")
    queued = host.futures.send(sid, "queued")  # not yet sent to the worker
    os.kill(worker_pid(host, sid), signal.SIGKILL)
    assert isinstance(running.exception(WAIT), WorkerCrashed)
    fifo.release()
    assert queued.result(WAIT).content == "echo: queued"  # taken by the next incarnation
    assert [t for t, _ in pairs(host.store.load(sid).messages())] == ["queued"]


STUCK_AFTER = 1.5
"""The test host's ``worker_call_timeout``: long enough for a fresh worker to load the
template on a busy machine (0.3 s was not), short enough to wait out."""


@pytest.mark.parametrize("mode", ["process"])
def test_a_worker_past_its_call_timeout_is_killed_from_the_timer(
    fifo: Fifo, make_host: HostFactory
) -> None:
    host = make_host(worker_call_timeout=STUCK_AFTER)
    sid = held_session(host, fifo)
    deaths = host.worker_deaths
    failed = host.futures.send(sid, "stuck", timeout=WAIT)
    assert isinstance(failed.exception(WAIT), WorkerCrashed)
    assert host.worker_deaths == deaths + 1
    fifo.release()
    assert host.futures.send(sid, "again").result(WAIT).content == "echo: again"


class _SlowStart(Plugin):
    """Holds every ``session_start`` until ``go`` is set (thread mode: it holds an Event)."""

    name = "slow-start"

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.go = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        self.entered.release()
        assert self.go.wait(WAIT)


@pytest.mark.parametrize("mode", ["thread"])
def test_a_lifecycle_call_cancelled_while_it_waits_for_a_helper_never_runs(
    make_host: HostFactory,
) -> None:
    host = make_host()
    slow = _SlowStart()
    busy = [host.futures.start_session(template(plugins=[slow])) for _ in range(HELPERS)]
    # One start runs its session_start; the others wait for the root supervisor, which
    # runs starts one at a time: every helper is busy until ``go``.
    assert slow.entered.acquire(timeout=WAIT)
    waiting = host.futures.start_session(template(), "never")
    assert waiting.cancel()
    slow.go.set()
    assert all(isinstance(f.result(WAIT), str) for f in busy)
    with pytest.raises(CancelledError):
        waiting.result(0)
    assert "never" not in {s.session_id for s in host.list_sessions()}
