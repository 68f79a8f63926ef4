"""``SessionThreads``: a loop handed to a parked thread runs there without the caller
waiting; parked threads are bounded in number and time, and end at ``close``."""

from __future__ import annotations

import contextvars
import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from supervisor._session_threads import SessionThreads
from tests.supervisor.host_helpers import WAIT, poll_until

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark")


class Loops:
    """Loops that record where they ran, each held until released."""

    def __init__(self) -> None:
        self.ran: dict[str, tuple[threading.Thread, str, str | None]] = {}
        self.started: dict[str, threading.Event] = {}
        self.release: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def loop(self, key: str, *, held: bool = False) -> tuple[threading.Event, threading.Event]:
        started, release = threading.Event(), threading.Event()
        if not held:
            release.set()
        self.started[key], self.release[key] = started, release
        return started, release

    def body(self, key: str) -> None:
        me = threading.current_thread()
        with self._lock:
            self.ran[key] = (me, me.name, MARK.get(None))
        MARK.set(key)  # a later loop on this thread must not see it
        self.started[key].set()
        assert self.release[key].wait(WAIT)


@pytest.fixture
def threads() -> Iterator[SessionThreads]:
    pool = SessionThreads(most_parked=2, idle=WAIT * 4)
    yield pool
    pool.close(WAIT)


def _run(pool: SessionThreads, loops: Loops, key: str, *, held: bool = False) -> threading.Event:
    started, _ = loops.loop(key, held=held)
    pool.run(lambda: loops.body(key), f"loop-{key}")
    return started


def test_a_loop_after_another_runs_on_its_parked_thread_renamed_in_a_fresh_context(
    threads: SessionThreads,
) -> None:
    loops = Loops()
    assert _run(threads, loops, "a").wait(WAIT)
    assert poll_until(lambda: threads.parked == 1)

    before = threading.active_count()
    started = _run(threads, loops, "b", held=True)
    assert threading.active_count() == before  # no new thread
    assert started.wait(WAIT)
    first, second = loops.ran["a"], loops.ran["b"]
    assert second[0] is first[0]
    assert (first[1], second[1]) == ("loop-a", "loop-b")
    assert second[2] is None  # the context "a" set is not "b"'s
    loops.release["b"].set()


def test_run_hands_the_loop_over_without_waiting_for_it(threads: SessionThreads) -> None:
    loops = Loops()
    assert _run(threads, loops, "a").wait(WAIT)
    assert poll_until(lambda: threads.parked == 1)
    gate = threading.Event()
    ran = threading.Event()

    def loop() -> None:
        assert gate.wait(WAIT)
        ran.set()

    threads.run(loop, "gated")  # returns while the loop waits: nothing waits on the loop
    assert not ran.is_set()
    gate.set()
    assert ran.wait(WAIT)


def test_at_most_most_parked_threads_wait_and_the_others_end(threads: SessionThreads) -> None:
    loops = Loops()
    for key in "abc":
        assert _run(threads, loops, key, held=True).wait(WAIT)
    ran_on = [loops.ran[key][0] for key in "abc"]
    assert len(set(ran_on)) == 3
    for key in "abc":
        loops.release[key].set()
    assert poll_until(lambda: sum(t.is_alive() for t in ran_on) == 2)
    assert threads.parked == 2


def test_a_parked_thread_ends_after_idle_seconds() -> None:
    pool = SessionThreads(most_parked=4, idle=0.05)
    loops = Loops()
    assert _run(pool, loops, "a").wait(WAIT)
    thread = loops.ran["a"][0]
    thread.join(WAIT)
    assert not thread.is_alive()
    assert pool.parked == 0
    pool.close(WAIT)


def test_close_ends_parked_threads_at_once_and_later_loops_park_no_more(
    threads: SessionThreads,
) -> None:
    loops = Loops()
    assert _run(threads, loops, "running", held=True).wait(WAIT)
    assert _run(threads, loops, "parked").wait(WAIT)
    assert poll_until(lambda: threads.parked == 1)
    parked, running = loops.ran["parked"][0], loops.ran["running"][0]

    threads.close(WAIT)
    assert not parked.is_alive()
    loops.release["running"].set()
    running.join(WAIT)
    assert not running.is_alive()
    assert _run(threads, loops, "after").wait(WAIT)  # still runs loops, on threads of their own
    after = loops.ran["after"][0]
    after.join(WAIT)
    assert not after.is_alive()
    assert after is not parked
    assert after is not running


def test_none_parked_gives_every_loop_a_thread_that_ends_with_it() -> None:
    pool = SessionThreads(most_parked=0)
    loops = Loops()
    for key in "ab":
        assert _run(pool, loops, key).wait(WAIT)
        loops.ran[key][0].join(WAIT)
    assert loops.ran["a"][0] is not loops.ran["b"][0]
    assert not any(loops.ran[key][0].is_alive() for key in "ab")


def test_a_loop_that_raises_ends_its_thread_and_the_pool_goes_on(
    threads: SessionThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    ended = threading.Event()

    def broken() -> None:
        ended.set()
        raise RuntimeError("a loop broke")

    threads.run(broken, "broken")
    assert ended.wait(WAIT)
    assert poll_until(lambda: len(seen) == 1)
    assert str(seen[0]) == "a loop broke"
    assert threads.parked == 0
    loops = Loops()
    assert _run(threads, loops, "next").wait(WAIT)


def test_loops_from_many_threads_each_run_once_while_parked_threads_time_out() -> None:
    """Hands-over racing the idle timeout (1 ms): no loop is lost or run twice."""
    pool = SessionThreads(most_parked=3, idle=0.001)
    lock = threading.Lock()
    counts: dict[int, int] = {}
    done = threading.Semaphore(0)
    per_caller, callers = 200, 4

    def loop(n: int) -> None:
        with lock:
            counts[n] = counts.get(n, 0) + 1
        done.release()

    def caller(base: int) -> None:
        for n in range(base, base + per_caller):
            pool.run(lambda n=n: loop(n), f"loop-{n}")  # type: ignore[misc]

    workers = [
        threading.Thread(target=caller, args=(i * per_caller,), name=f"caller-{i}")
        for i in range(callers)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT)
    for _ in range(per_caller * callers):
        assert done.acquire(timeout=WAIT)
    assert counts == dict.fromkeys(range(per_caller * callers), 1)
    pool.close(WAIT)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"most_parked": -1}, "most_parked must be >= 0, got -1"),
        ({"idle": 0}, "idle must be > 0 seconds, got 0"),
    ],
)
def test_bad_options_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SessionThreads(**options)  # type: ignore[arg-type]


def test_a_parked_thread_holds_nothing_of_the_loop_it_ran(threads: SessionThreads) -> None:
    """The ended actor (a session's history, its template) is garbage once its loop ends."""

    class State:
        pass

    state = State()
    held = weakref.ref(state)
    ran = threading.Event()

    def loop(state: State = state) -> None:
        ran.set()

    threads.run(loop, "holder")
    del loop, state
    assert ran.wait(WAIT)
    assert poll_until(lambda: threads.parked == 1)
    gc.collect()
    assert held() is None
