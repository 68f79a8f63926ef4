"""Real plugins, tools, models and waiters shared by the ``AgentHost`` tests.

Fakes, never mocks, and never a sleep: every wait is on a condition or an
event, with a bound (``WAIT``).
"""

from __future__ import annotations

import functools
import gc
import json
import os
import random
import select
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actors import (
    AgentTemplate,
    EchoModel,
    Event,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    Snapshot,
    Subscriber,
    Tool,
    is_stripped_marker,
    tool,
)
from supervisor import (
    AgentHost,
    MemoryCheckpointStore,
    RemoteError,
    SessionCrashed,
    SessionNotFound,
)
from supervisor._session_threads import DEFAULT_PARKED_THREADS, PARKED_NAME

__all__ = [
    "DEFAULT_PARKED_THREADS",
    "MODES",
    "WAIT",
    "WORKERS",
    "EventWaiter",
    "FlakyModel",
    "Gate",
    "HostFactory",
    "Journal",
    "ModelDown",
    "PacedSenders",
    "SessionTally",
    "StartSeen",
    "add",
    "assert_acknowledged_turns_kept",
    "assert_threads_back",
    "blocking_tool",
    "exit_tool",
    "host_options",
    "pairs",
    "poll_until",
    "process_ended_within",
    "registry_lookup_fails",
    "same_error",
    "session_thread_gone",
    "template",
    "thread_only",
    "watch_events",
    "xfail_in_process",
]

HostFactory = Callable[..., AgentHost]
"""The ``make_host`` fixture: builds an ``AgentHost`` in the test's mode (see conftest)."""

WAIT = 5.0
"""Upper bound of every wait in these tests (seconds)."""

MODES = ("thread", "process", "process-portable")
"""Where a host runs its sessions: threads of this process, or ``WORKERS`` worker processes
whose pipes are read the platform's way (``process``: on Linux, by waiting callers and idle
sessions themselves) or the portable way (``process-portable``: reader threads only)."""

WORKERS = 2
"""Worker processes of a process-mode test host."""


def host_options(mode: str) -> dict[str, Any]:
    """The ``AgentHost`` keyword arguments of ``mode`` (one of ``MODES``)."""
    assert mode in MODES, mode
    if mode == "thread":
        return {}
    if mode == "process-portable":
        return {"workers": WORKERS, "worker_io": "portable"}
    return {"workers": WORKERS}


def thread_only(reason: str) -> pytest.MarkDecorator:
    """Run a test of a module parametrised by a ``mode`` fixture in thread mode only.

    Overrides the fixture with a direct parametrisation whose process case is
    skipped with ``reason`` (so ``-ra`` lists every thread-only test and why).
    """
    skip = pytest.mark.skip(reason=reason)
    return pytest.mark.parametrize(
        "mode", ["thread", *(pytest.param(mode, marks=skip) for mode in MODES[1:])]
    )


def xfail_in_process(reason: str) -> pytest.MarkDecorator:
    """Like ``thread_only``, but the process case runs as a strict xfail: a known bug there."""
    xfail = pytest.mark.xfail(strict=True, reason=reason)
    return pytest.mark.parametrize(
        "mode", ["thread", *(pytest.param(mode, marks=xfail) for mode in MODES[1:])]
    )


def same_error(exc: BaseException | None, error: type[BaseException]) -> bool:
    """Whether ``exc`` is an ``error``, or the ``RemoteError`` that carries one raised in a
    worker process back across the pipe (by type name and message only)."""
    if isinstance(exc, RemoteError):
        return exc.type_name == error.__name__
    return isinstance(exc, error)


@dataclass(frozen=True, slots=True)
class StartSeen:
    """What one ``session_start`` of the ``Journal`` plugin saw, and where it ran.

    ``pid`` and ``native_id`` name the thread that ran the session (in this
    process in thread mode, in a worker process in process mode); ``thread_name`` is
    its name then (each incarnation's own, on a thread a host may reuse).
    """

    session_id: str
    resumed: bool
    stripped: tuple[str, ...]
    turns_seen: int
    handle_was: object
    pid: int
    native_id: int
    thread_name: str


_RECORDS = "journal.jsonl"


class Journal(Plugin):
    """A plugin holding a live value in its state, as real plugins hold connections.

    ``state["handle"]`` is an open file ``<directory>/<session id>.journal``
    (when ``directory`` is given) or a ``threading.Lock``: both are stripped
    from snapshots, so on resume ``session_start`` sees ``"handle"`` in
    ``ctx.stripped`` and rebuilds it. ``state["turns_seen"]`` counts completed
    turns (plain, persisted). Every start and end is recorded; ``broken``
    makes a *resumed* start raise (a plugin whose resource cannot be rebuilt),
    ``fail_first_start`` a first start.

    Process-safe with a ``directory``: the records are JSON lines appended to
    ``<directory>/journal.jsonl`` (one ``write`` of one line on an ``O_APPEND``
    descriptor each, so lines from many threads and processes never mix) and
    the two switches are files there, so a copy of the plugin in a worker
    process reports back and obeys switches flipped after it was shipped. It
    holds no lock, so it pickles. Without a directory everything stays in this
    process's memory (thread mode only: pickling it raises ``TypeError``).
    Shared by many sessions: thread-safe either way.
    """

    name = "journal"

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        self._lines: list[str] | None = [] if directory is None else None
        self._flags: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        if self.directory is None:
            raise TypeError("Journal() records in memory; give it a directory to ship it")
        return {"directory": self.directory, "_lines": None, "_flags": set()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- switches (files with a directory, so a worker's copy sees them) -------------------

    @property
    def broken(self) -> bool:
        return self._flag("broken")

    @broken.setter
    def broken(self, value: bool) -> None:
        self._set_flag("broken", value)

    @property
    def fail_first_start(self) -> bool:
        return self._flag("fail_first_start")

    @fail_first_start.setter
    def fail_first_start(self, value: bool) -> None:
        self._set_flag("fail_first_start", value)

    def _flag(self, name: str) -> bool:
        if self.directory is None:
            return name in self._flags
        return (self.directory / f"journal.{name}").exists()

    def _set_flag(self, name: str, value: bool) -> None:
        if self.directory is None:
            (self._flags.add if value else self._flags.discard)(name)
        elif value:
            (self.directory / f"journal.{name}").touch()
        else:
            (self.directory / f"journal.{name}").unlink(missing_ok=True)

    # -- hooks -----------------------------------------------------------------------------

    def session_start(self, ctx: PluginContext) -> None:
        handle = ctx.state.get("handle")
        self._record(
            kind="start",
            session_id=ctx.session_id,
            resumed=ctx.resumed,
            stripped=list(ctx.stripped),
            turns_seen=int(ctx.state.get("turns_seen", 0)),
            handle_was=handle if handle is None or is_stripped_marker(handle) else repr(handle),
            pid=os.getpid(),
            native_id=threading.get_native_id(),
            thread_name=threading.current_thread().name,
        )
        if self.fail_first_start and not ctx.resumed:
            raise RuntimeError("journal storage unavailable")
        if self.broken and ctx.resumed:
            raise RuntimeError("journal cannot be reopened")
        ctx.state.setdefault("turns_seen", 0)
        if self.directory is None:
            ctx.state["handle"] = threading.Lock()
        else:
            path = self.directory / f"{ctx.session_id}.journal"
            ctx.state["handle"] = path.open("a", encoding="utf-8")

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["turns_seen"] += 1
        handle = ctx.state["handle"]
        if not isinstance(handle, dict):  # a live handle, not a stripped marker
            if self.directory is None:
                with handle:
                    pass
            else:
                handle.write(f"turn {ctx.state['turns_seen']}\n")
                handle.flush()

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        close = getattr(ctx.state.get("handle"), "close", None)
        if callable(close):
            close()
        self._record(kind="end", session_id=ctx.session_id, reason=reason)

    # -- records ---------------------------------------------------------------------------

    def _record(self, **fields: Any) -> None:
        line = json.dumps(fields) + "\n"
        if self._lines is not None:
            self._lines.append(line)  # one append: atomic under the GIL
            return
        assert self.directory is not None
        fd = os.open(self.directory / _RECORDS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def _records(self) -> list[dict[str, Any]]:
        if self._lines is not None:
            lines = list(self._lines)
        else:
            assert self.directory is not None
            try:
                text = (self.directory / _RECORDS).read_text(encoding="utf-8")
            except FileNotFoundError:
                return []
            lines = text.splitlines(keepends=True)
        # Only whole lines: a line being written by another process is not one yet.
        return [json.loads(line) for line in lines if line.endswith("\n")]

    @property
    def starts(self) -> list[StartSeen]:
        """Every start so far, in order."""
        return [
            StartSeen(
                r["session_id"],
                r["resumed"],
                tuple(r["stripped"]),
                r["turns_seen"],
                r["handle_was"],
                r["pid"],
                r["native_id"],
                r["thread_name"],
            )
            for r in self._records()
            if r["kind"] == "start"
        ]

    @property
    def ends(self) -> list[tuple[str, str]]:
        """Every ``(session id, reason)`` of ``session_end`` so far, in order."""
        return [(r["session_id"], r["reason"]) for r in self._records() if r["kind"] == "end"]

    def of(self, session_id: str) -> list[StartSeen]:
        """Every start of ``session_id`` so far, in order."""
        return [s for s in self.starts if s.session_id == session_id]

    def wait_starts(self, session_id: str, count: int, timeout: float = WAIT) -> list[StartSeen]:
        """Wait until ``session_id`` started ``count`` times; return its starts.

        The records may be written by another process, which cannot notify a
        condition here: this re-reads them every 10 ms, up to ``timeout``.
        """
        ok = poll_until(lambda: len(self.of(session_id)) >= count, timeout)
        starts = self.of(session_id)
        assert ok, f"{session_id!r} started {len(starts)} times, wanted {count}"
        return starts

    def wait_ends(self, session_id: str, count: int, timeout: float = WAIT) -> list[str]:
        """Wait until ``session_id`` ended ``count`` times; return the reasons."""

        def reasons() -> list[str]:
            return [reason for ended, reason in self.ends if ended == session_id]

        ok = poll_until(lambda: len(reasons()) >= count, timeout)
        assert ok, f"{session_id!r} ended {len(reasons())} times, wanted {count}"
        return reasons()


class HibernateHookStore(MemoryCheckpointStore):
    """Runs ``hook`` once, right after the next hibernate checkpoint is saved: between a
    hibernation's snapshot and the stop of the incarnation it checkpointed."""

    hook: Callable[[], object] | None = None

    def save(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> Any:
        saved = super().save(snapshot, *args, **kwargs)
        if snapshot.label == "hibernate" and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return saved


def poll_until(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Bounded wait for a condition no event announces (a thread of another process
    exiting, a line another process writes, the pool burying a worker that ran no
    session): re-check every 10 ms up to ``timeout``; True once it holds."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        tick.wait(0.01)
    return True


class SessionTally:
    """Subscriber counting ``crashed``, ``resumed`` and ``given_up`` events per session;
    wait for counts with a bound (the chaos tests' proof that each crash was resumed)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.crashed: Counter[str] = Counter()
        self.resumed: Counter[str] = Counter()
        self.given_up: list[str] = []

    def subscriber(self, session_id: str) -> Subscriber:
        def on_event(event: Event) -> None:
            with self._cond:
                if event.type == "crashed":
                    self.crashed[session_id] += 1
                elif event.type == "resumed":
                    self.resumed[session_id] += 1
                elif event.type == "given_up":
                    self.given_up.append(session_id)
                self._cond.notify_all()

        return on_event

    def wait_resumed(self, expected: Counter[str], timeout: float = WAIT) -> None:
        """Wait until every session was crashed and resumed ``expected[sid]`` times."""

        def done() -> bool:
            return bool(self.given_up) or all(
                self.crashed[sid] >= n and self.resumed[sid] >= n for sid, n in expected.items()
            )

        with self._cond:
            ok = self._cond.wait_for(done, timeout)
            assert not self.given_up, f"sessions given up: {self.given_up}"
            assert ok, f"not resumed in time: wanted {dict(expected)}, saw {dict(self.resumed)}"

    def wait_all_active(self, host: AgentHost, timeout: float = WAIT) -> None:
        """Wait until ``list_sessions`` shows every session active.

        Status changes are not events of their own, so this re-reads the list
        each time a session event arrives, or every 50 ms at most, up to ``timeout``.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while {s.status for s in host.list_sessions()} != {"active"}:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"not all active: {host.list_sessions()}"
                self._cond.wait(min(remaining, 0.05))


class EventWaiter:
    """Subscriber of a session's event stream; wait for an event type with a bound."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def types(self) -> list[str]:
        with self._cond:
            return [e.type for e in self.events]

    def count(self, type_: str) -> int:
        with self._cond:
            return sum(1 for e in self.events if e.type == type_)

    def wait_for(self, type_: str, count: int = 1, timeout: float = WAIT) -> Event:
        """Wait for the ``count``-th event of ``type_``; return it."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._count_locked(type_) >= count, timeout)
            seen = [e for e in self.events if e.type == type_]
        assert ok, f"waited for {count} {type_!r} events, saw {[e.type for e in self.events]}"
        return seen[count - 1]

    def _count_locked(self, type_: str) -> int:
        return sum(1 for e in self.events if e.type == type_)


def watch_events(host: AgentHost, session_id: str) -> EventWaiter:
    """Subscribe an ``EventWaiter`` to the session's one event stream (across restarts)."""
    waiter = EventWaiter()
    host.subscribe(session_id, waiter)
    return waiter


class ModelDown(RuntimeError):
    """What ``FlakyModel`` raises: a provider outage (not a crash of the session)."""


class FlakyModel(EchoModel):
    """``EchoModel`` that raises ``ModelDown`` for user text starting with ``!fail``."""

    model_string = "flaky-echo"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        last_user = next((m for m in reversed(messages) if m.role == "user"), None)
        if last_user is not None and (last_user.content or "").startswith("!fail"):
            raise ModelDown("provider unavailable")
        return super().generate(messages, tools)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def exit_tool() -> str:
    """A tool that raises SystemExit: a crash of its session (never of the host)."""
    raise SystemExit(3)


class Gate:
    """A tool's rendezvous: ``entered`` is set when it runs; it returns once ``release`` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()


def blocking_tool(gate: Gate) -> Tool:
    """A tool named ``hold`` that blocks its session until ``gate.release`` (bounded)."""

    @tool
    def hold() -> str:
        """Hold the session busy."""
        gate.entered.set()
        assert gate.release.wait(WAIT), "test never released the gate"
        return "released"

    return hold


def template(
    journal: Journal | None = None,
    *,
    model: Any = "echo",
    tools: Iterable[Tool] = (),
    plugins: Iterable[Plugin] = (),
) -> AgentTemplate:
    """A template with the ``add`` and ``exit_tool`` tools, ``journal`` and ``tools`` extra."""
    chosen = [journal] if journal is not None else []
    return AgentTemplate(
        model=model,
        tools=(add, exit_tool, *tools),
        instructions="You are a test agent.",
        plugins=(*chosen, *plugins),
    )


def pairs(history: Sequence[Message]) -> list[tuple[str, str]]:
    """The (user text, final assistant answer) of every turn of a tool-free history."""
    out: list[tuple[str, str]] = []
    pending: str | None = None
    for message in history:
        if message.role == "user":
            pending = message.content or ""
        elif message.role == "assistant" and not message.tool_calls and pending is not None:
            out.append((pending, message.content or ""))
            pending = None
    return out


def assert_threads_back(before: Collection[threading.Thread], *, parked: int = 0) -> None:
    """Assert every thread started since ``before`` has ended (bounded wait), but for at
    most ``parked`` parked session threads (of a host still running)."""
    if parked:
        assert poll_until(lambda: all(_ended_or_parked(t) for t in _since(before)))
        waiting = [t for t in _since(before) if t.name == PARKED_NAME]
        assert len(waiting) <= parked, f"{len(waiting)} threads parked, at most {parked}"
        return
    for thread in _since(before):
        thread.join(WAIT)
    left = [t.name for t in _since(before) if t.is_alive()]
    assert not left, f"threads still running: {left}"


def _since(before: Collection[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before]


def _ended_or_parked(thread: threading.Thread) -> bool:
    return not thread.is_alive() or thread.name == PARKED_NAME


def session_thread_gone(journal: Journal, session_id: str) -> bool:
    """Whether no thread runs ``session_id`` any more (bounded wait).

    A thread of this process has exited or been renamed (a host parks the thread of
    an ended incarnation under another name, and renames it for each incarnation it
    runs); one in a worker process is watched through ``/proc/<pid>/task/<tid>``
    until it is gone (or its process is).
    """
    for seen in journal.of(session_id):
        if seen.pid == os.getpid():
            thread = next((t for t in threading.enumerate() if t.native_id == seen.native_id), None)
            if thread is not None and not poll_until(
                functools.partial(_ran_other_since, thread, seen.thread_name)
            ):
                return False
        elif not poll_until(functools.partial(_thread_exited, seen.pid, seen.native_id)):
            return False
    return True


def _ran_other_since(thread: threading.Thread, name: str) -> bool:
    """Whether ``thread`` exited, or runs under another name than ``name`` now."""
    return not thread.is_alive() or thread.name != name


def _thread_exited(pid: int, native_id: int) -> bool:
    task = Path(f"/proc/{pid}/task/{native_id}/stat")
    try:
        state = task.read_text(encoding="ascii").rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in {"Z", "X"}


def registry_lookup_fails(host: AgentHost, session_id: str) -> bool:
    """Whether the registry refuses ``session_id`` (no entry handed out)."""
    try:
        host.registry.get(session_id)
    except SessionNotFound:
        return True
    return False


class PacedSenders:
    """The chaos tests' sender threads: each sends turns to random sessions of ``host``
    and records every turn it got an answer for.

    Paced on the faults injected so far (``fault_done``): a sender sends at most
    ``turns_per_fault`` turns per fault, plus a start, so histories (and the
    checkpoints every turn rewrites) stay a few hundred messages long whatever
    the machine's speed. Seeded per sender; only the interleaving varies.

    Attributes:
        acked: ``(sender, text, answer)`` of every acknowledged turn, by session.
        unacknowledged: ``SessionCrashed`` raised by ``send`` (``WorkerCrashed`` is
            one), by type name: the turn was not acknowledged and the sender moves on.
        failures: Anything else a sender raised (it stopped there).
    """

    def __init__(
        self,
        host: AgentHost,
        session_ids: Iterable[str],
        *,
        senders: int,
        turns_per_fault: float,
        name: str,
    ) -> None:
        self.host = host
        self.acked: dict[str, list[tuple[int, str, str]]] = {sid: [] for sid in session_ids}
        self.unacknowledged = Counter[str]()
        self.failures: list[BaseException] = []
        self._turns_per_fault = turns_per_fault
        self._faults = 0
        self._lock = threading.Lock()  # guards acked and unacknowledged
        self._pace = threading.Condition()  # guards _faults; notified with _stop too
        self._stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(i,), name=f"{name}-{i}")
            for i in range(senders)
        ]

    @property
    def total(self) -> int:
        """How many turns were acknowledged in all."""
        with self._lock:
            return sum(len(turns) for turns in self.acked.values())

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def fault_done(self) -> None:
        """One more fault injected: the senders may go on."""
        with self._pace:
            self._faults += 1
            self._pace.notify_all()

    def stop(self) -> None:
        """Stop the senders and join them (each within a bound)."""
        with self._pace:
            self._stop.set()
            self._pace.notify_all()
        for thread in self.threads:
            thread.join(WAIT * 2)

    def _within_pace(self, turn: int) -> bool:
        return self._stop.is_set() or turn < self._turns_per_fault * (self._faults + 2)

    def _run(self, index: int) -> None:
        rng = random.Random(index)
        turn = 0
        try:
            while not self._stop.is_set():
                with self._pace:
                    self._pace.wait_for(functools.partial(self._within_pace, turn), WAIT)
                sid = rng.choice(list(self.acked))
                text = f"sender {index} turn {turn}"
                turn += 1
                try:
                    answer = self.host.send(sid, text, timeout=WAIT)
                except SessionCrashed as exc:
                    with self._lock:
                        self.unacknowledged[type(exc).__name__] += 1
                    continue
                with self._lock:
                    self.acked[sid].append((index, text, answer.content or ""))
        except BaseException as exc:
            self.failures.append(exc)


def assert_acknowledged_turns_kept(
    host: AgentHost, acked: dict[str, list[tuple[int, str, str]]], senders: int
) -> None:
    """Every acknowledged ``(sender, text, answer)`` turn is in its session's history,
    none is recorded twice, and each sender's turns are in the order it sent them."""
    for sid, turns in acked.items():
        history = pairs(host.history(sid))
        assert all(answer == f"echo: {text}" for text, answer in history)
        texts = [text for text, _ in history]
        assert len(texts) == len(set(texts)), f"{sid}: a turn was recorded twice"
        position = {text: i for i, text in enumerate(texts)}
        for _index, text, answer in turns:
            assert answer == f"echo: {text}"
            assert text in position, f"{sid}: acknowledged {text!r} is missing"
        for index in range(senders):
            mine = [position[text] for i, text, _ in turns if i == index]
            assert mine == sorted(mine), f"{sid}: sender {index}'s turns out of order"


def process_ended_within(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` (any process, not only a child) has ended; False after
    ``timeout``. Waits on its pidfd, which becomes readable when it exits, not by polling."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True  # already gone
    try:
        ended, _, _ = select.select([handle], [], [], timeout)
    finally:
        os.close(handle)
    return bool(ended)


class Fifo:
    """A cross-process rendezvous through a named pipe (the ``fifo`` fixture): whatever
    reads one byte from ``path`` (a model call, a plugin's start) waits for a ``release``."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._fd = os.open(path, os.O_RDWR)  # a reader's open never waits for a writer

    def release(self, calls: int = 1) -> None:
        """Let ``calls`` waiting (or future) readers go."""
        os.write(self._fd, b"x" * calls)

    def close(self) -> None:
        """Let every reader go from now on, even one a failed test left waiting: the pipe
        becomes a plain file to read bytes from (a reader already waiting gets EOF)."""
        os.write(self._fd, b"x" * 64)
        self.path.unlink()
        self.path.write_bytes(b"x" * 4096)
        os.close(self._fd)


class CyclicGarbage:
    """Names of the types in ``of`` that the code run inside ``with`` left in reference
    cycles (``names``, once the block ended): the collector saves what it would free
    (``gc.DEBUG_SAVEALL``) and is restored afterwards."""

    def __init__(self, of: tuple[type, ...]) -> None:
        self.of = of
        self.names: list[str] = []

    def __enter__(self) -> CyclicGarbage:
        gc.collect()
        self._enabled = gc.isenabled()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            gc.collect()
            self.names = sorted({type(o).__name__ for o in gc.garbage if isinstance(o, self.of)})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            if self._enabled:
                gc.enable()
