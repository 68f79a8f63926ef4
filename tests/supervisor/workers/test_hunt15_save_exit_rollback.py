"""A turn whose checkpoint save raises ``SystemExit``, ``KeyboardInterrupt`` or
``GeneratorExit`` is rolled back in every mode, as one whose save raises an ``Exception``:
history, turn counter and plugin states as before the turn, its steering given back, an
``error`` event published, and the session goes on.

Found by a bug hunt: in process mode the host saves a turn's checkpoint on the thread that
delivers the worker's reply (a blocking ``send`` on the main thread: the main thread).
``SessionLink.finish_send`` had the worker roll the turn back only for an ``Exception``:
with a store raising ``SystemExit`` there, the worker kept the unsaved turn. The next
``history`` showed it, the next turn's checkpoint saved it after all (an answer the caller
was told had failed), and a restart before that lost it again. A ``GeneratorExit`` (which
``Checkpoints.save`` lets through on any thread) did the same on a non-blocking ``send``,
and ended the thread delivering the reply. And a blocking call on the main thread that
delivered another caller's non-blocking ``send`` reply (its session's) raised the exit
there, leaving that ``send`` unanswered until its deadline.

What the caller gets: a blocking ``send`` on the main thread whose save ran there raises
the exit as it is (it means "stop the program"); off the main thread (a non-blocking
``send``) it is a ``CallAborted`` caused by it. A ``GeneratorExit`` is a
``CheckpointAborted`` (the save failed, not the program), as in thread mode.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from actors import CheckpointAborted, Message, Snapshot
from supervisor import AgentHost, CallAborted, CheckpointInfo, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT, HostFactory, Journal, template, watch_events

EXITS = [SystemExit, KeyboardInterrupt, GeneratorExit]
EXIT_IDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit"]


class ExitOnce(MemoryCheckpointStore):
    """A memory store whose next ``save`` after ``arm`` raises ``exit``; the others save."""

    def __init__(self, exit: type[BaseException]) -> None:
        super().__init__()
        self.exit = exit
        self._armed = threading.Event()
        self.failed_on_main = False  # whether the failing save ran on the main thread

    def arm(self) -> None:
        self._armed.set()

    def save(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> CheckpointInfo:
        if self._armed.is_set():
            self._armed.clear()
            self.failed_on_main = threading.current_thread() is threading.main_thread()
            raise self.exit("the store gave up")
        return super().save(snapshot, *args, **kwargs)


@pytest.fixture(params=EXITS, ids=EXIT_IDS)
def exit(request: pytest.FixtureRequest) -> type[BaseException]:
    """The exception the store's failing save raises."""
    exit: type[BaseException] = request.param
    return exit


def _users(history: list[Message]) -> list[str]:
    return [m.content or "" for m in history if m.role == "user"]


def _started(make_host: HostFactory, store: ExitOnce, tmp_path: Path) -> tuple[AgentHost, str]:
    """A host on ``store`` and a session of it with a ``Journal`` (a plugin whose state
    counts the turns) that has had one turn, ``first``."""
    host = make_host(store=store)
    sid = host.start_session(template(Journal(tmp_path)))
    assert host.send(sid, "first", timeout=WAIT).content == "echo: first"
    return host, sid


def _check_blocking_error(error: BaseException, store: ExitOnce) -> None:
    """``error`` is what a blocking ``send`` on the main thread raises for a save that
    raised ``store.exit`` (see the module docstring). In process mode the save runs on the
    thread delivering the reply: nearly always the caller's own, the main thread here, but
    the pipe's reader thread when the reply came before the caller waited for it."""
    exit = store.exit
    if exit is GeneratorExit:
        assert isinstance(error, CheckpointAborted), repr(error)
        assert isinstance(error.__cause__, GeneratorExit)
    elif store.failed_on_main:
        assert type(error) is exit, repr(error)
        assert str(error) == "the store gave up"
    else:  # the session's thread (thread mode), or the reader thread
        assert isinstance(error, CallAborted), repr(error)
        assert isinstance(error.__cause__, exit)


def _check_kept_as_before(host: AgentHost, store: ExitOnce, sid: str, users: list[str]) -> None:
    """The failed turn left nothing: a retry's turn is saved as the session's second, with
    the plugin's count of turns at two, and a restart resumes exactly that."""
    assert _users(host.history(sid)) == ["first"]
    assert host.send(sid, "second", timeout=WAIT).content == "echo: second"
    history = host.history(sid)
    assert _users(history) == users
    saved = store.load(sid)
    assert saved.messages() == history
    assert saved.state["turns"] == 2
    assert saved.state["plugins"]["journal"]["turns_seen"] == 2
    waiter = watch_events(host, sid)
    host.kill(sid)
    waiter.wait_for("resumed")
    assert host.history(sid) == history


def test_a_blocking_send_whose_save_exits_is_rolled_back(
    make_host: HostFactory, exit: type[BaseException], tmp_path: Path
) -> None:
    assert threading.current_thread() is threading.main_thread()
    store = ExitOnce(exit)
    host, sid = _started(make_host, store, tmp_path)
    waiter = watch_events(host, sid)
    store.arm()

    with pytest.raises((exit, CallAborted, CheckpointAborted)) as raised:
        host.send(sid, "lost", timeout=WAIT)

    _check_blocking_error(raised.value, store)
    failed = waiter.wait_for("error").data
    assert failed["turn"] == 2
    assert exit.__name__ in failed["error"]
    assert waiter.count("turn_finished") == 0
    _check_kept_as_before(host, store, sid, ["first", "second"])


def test_steering_taken_by_a_turn_whose_save_exits_reaches_the_retry(
    make_host: HostFactory, exit: type[BaseException], tmp_path: Path
) -> None:
    store = ExitOnce(exit)
    host, sid = _started(make_host, store, tmp_path)
    host.steer(sid, "note")
    store.arm()

    with pytest.raises((exit, CallAborted, CheckpointAborted)):
        host.send(sid, "lost", timeout=WAIT)

    _check_kept_as_before(host, store, sid, ["first", "note", "second"])


def test_a_non_blocking_send_whose_save_exits_is_rolled_back(
    make_host: HostFactory, exit: type[BaseException], tmp_path: Path
) -> None:
    store = ExitOnce(exit)
    host, sid = _started(make_host, store, tmp_path)
    waiter = watch_events(host, sid)
    store.arm()

    error = host.futures.send(sid, "lost", timeout=WAIT).exception(WAIT)

    if exit is GeneratorExit:
        assert isinstance(error, CheckpointAborted), repr(error)
    else:
        assert isinstance(error, CallAborted), repr(error)
    assert isinstance(error.__cause__, exit)
    assert waiter.wait_for("error").data["turn"] == 2
    _check_kept_as_before(host, store, sid, ["first", "second"])


class ExitOnTheMainThread(MemoryCheckpointStore):
    """A memory store whose first save of a turn (a snapshot without a label) on the main
    thread after ``arm`` raises ``exit``; the others save."""

    def __init__(self, exit: type[BaseException]) -> None:
        super().__init__()
        self.exit = exit
        self._armed = False

    def arm(self) -> None:
        self._armed = True

    def save(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> CheckpointInfo:
        main = threading.current_thread() is threading.main_thread()
        if self._armed and main and snapshot.label is None:
            self._armed = False
            raise self.exit("the store gave up")
        return super().save(snapshot, *args, **kwargs)


_ATTEMPTS = 20
"""Non-blocking sends tried until one's save runs on the main thread (see the test)."""


@pytest.mark.parametrize("mode", ["process", "process-portable"])
@pytest.mark.parametrize("exit", [SystemExit, KeyboardInterrupt], ids=EXIT_IDS[:2])
def test_a_non_blocking_send_saved_by_a_blocking_call_on_the_main_thread_is_answered(
    make_host: HostFactory, exit: type[BaseException]
) -> None:
    """A blocking call of a session on the main thread (``checkpoint`` here) delivers the
    session's frames it reads, a non-blocking ``send``'s reply among them, whose save then
    runs there. The store's exit stops the blocking call (on the main thread it means
    "stop the program"); the ``send`` is answered with a ``CallAborted`` and its turn
    rolled back. Before, the exit left the ``send``'s call unanswered: its future waited
    out its timeout, or its worker was killed at ``worker_call_timeout``."""
    store = ExitOnTheMainThread(exit)
    host = make_host(store=store)
    sid = host.start_session(template())
    store.arm()
    kept: list[str] = []
    for attempt in range(_ATTEMPTS):
        text = f"turn {attempt}"
        sent = host.futures.send(sid, text, timeout=4 * WAIT)
        try:
            host.checkpoint(sid, "probe")
        except exit:
            break
        assert sent.result(WAIT).content == f"echo: {text}"  # its reply was saved elsewhere
        kept.append(text)
    else:
        pytest.fail(f"no save of {_ATTEMPTS} non-blocking sends ran on the main thread")

    error = sent.exception(WAIT)  # (raises TimeoutError if it is not answered by then)

    assert isinstance(error, CallAborted), repr(error)
    assert isinstance(error.__cause__, exit)
    assert _users(host.history(sid)) == kept
    assert host.send(sid, "again", timeout=WAIT).content == "echo: again"
    assert _users(store.load(sid).messages()) == [*kept, "again"]
