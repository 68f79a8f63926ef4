"""The worker process: hosts many ``AgentSession`` actors behind one pipe.

``worker_main`` is the process target. Its reader loop (the main thread) takes
frames off the pipe (schema in ``supervisor.workers._protocol``) and never
blocks on a session: calls on a session are *told* to its actor, which replies
on the pipe itself when it has finished; ``load_template`` (which imports the
template's modules), ``start`` and ``stop`` (which wait for plugin hooks) run on
a small thread pool; ``steer`` goes straight into the session's steering queue
so it reaches a turn that is already running.

An idle session reads the pipe itself while no other thread does, so a call
for it runs without a hand-off from the main thread (see
``supervisor.workers._worker_pipe``). Frames are read by one thread at a time,
in order.

Events a session publishes while it handles a call are held back and written
with the call's reply, in the same frame, so a quick turn costs one frame
instead of one per event. Before a slow step (a model call or a tool that took
longer than ``SLOW_STEP`` the last time, or has not run yet) the events held so
far are written on their own, so a consumer watching the stream still sees
them while that step runs. No timer or extra thread is involved: a fast step
costs two clock reads.

Sessions run as ``SupervisedActor`` subclasses of ``AgentSession``: a tool
raising ``SystemExit`` kills its session alone; the worker fails every call
that was waiting on it and pushes a ``down`` frame so the parent crashes the
session's proxy with that reason. A ``MemoryError`` in a tool is fatal to the
whole worker (exit code ``MEMORY_EXIT``): past its memory limit a process is in
no state to go on, and the parent resumes its sessions elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import cloudpickle
import pykka

from actors import (
    AgentSession,
    AgentTemplate,
    Credentials,
    Event,
    EventBuffer,
    Model,
    Snapshot,
    SteeringQueue,
    Tool,
)
from supervisor._actor import SupervisedActor, begin_terminate, kill, terminate
from supervisor._lifecycle import Down, is_abnormal, lifecycle_of
from supervisor.errors import TemplateNotLoadable
from supervisor.monitors import monitor
from supervisor.workers._checkpoint_delta import DeltaWriter
from supervisor.workers._frames import write_frame
from supervisor.workers._io import PipeIO
from supervisor.workers._io import named as io_named
from supervisor.workers._memory_limit import apply_memory_limit, explained
from supervisor.workers._protocol import POKE, SESSION_DOWN, encode_error, pack, pack_escaped
from supervisor.workers._worker_pipe import PipeInbox, WorkerPipe

__all__ = ["HOST_LOST", "MEMORY_EXIT", "SLOW_STEP", "WorkerSetup", "worker_main"]

logger = logging.getLogger("supervisor.workers")

MEMORY_EXIT = 75
"""Exit code of a worker that ran out of memory (a tool raised ``MemoryError``)."""

SLOW_STEP = 0.001
"""Seconds after which a model call or tool counts as slow: its events go out before it."""

_STOP_TIMEOUT = 10.0

_EXIT_GRACE = 2.0
"""Seconds a worker that stopped its sessions waits for its remaining threads before it
exits without them (see ``_leave_stuck_threads``)."""

HOST_LOST = "host_lost"
"""The ``session_end`` reason of sessions a worker stops because its host is gone (its pipe
ended without a ``shutdown`` frame: the host process was killed or crashed). Plugins learn
that no final checkpoint was taken, unlike ``normal``."""


_SESSION_CALLS = frozenset({"send", "snapshot", "history", "rollback"})

_POKE = pack({"op": POKE})


class _Call(NamedTuple):
    """A request told to a session actor; it replies on the pipe itself."""

    id: int
    op: str
    payload: dict[str, Any]


def _fatal_on_memory_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(**arguments: Any) -> Any:
        try:
            return fn(**arguments)
        except MemoryError:
            os._exit(MEMORY_EXIT)

    return run


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSetup:
    """What a worker applies before it serves (sent with the process, once).

    Attributes:
        memory_limit: RLIMIT_AS in bytes, or ``None``.
        initializer: cloudpickle bytes of ``(fn, args)``: the host's
            ``worker_initializer`` and ``worker_initargs``, or ``None``.
        io: The name of the pipe backend (``supervisor.workers._io``), the
            parent's: both ends of a pipe read it the same way.
        switch_interval: The interpreter's switch interval (``sys.setswitchinterval``)
            in the host's process when it made its workers, or ``None`` for Python's
            own: a worker's session threads are tuned as the host's are.
    """

    memory_limit: int | None = None
    initializer: bytes | None = None
    io: str = "auto"
    switch_interval: float | None = None


def worker_main(conn: Connection, setup: WorkerSetup) -> None:
    """Process target: apply ``setup``, serve the pipe until ``shutdown`` or EOF.

    A worker ignores SIGINT. Ctrl-C in a terminal signals the whole foreground
    process group, workers included; the host handles it (``KeyboardInterrupt``
    ends its ``with`` block) and its shutdown needs the workers alive to take
    the sessions' final checkpoints. A worker whose parent is gone exits on EOF,
    after stopping its sessions with reason ``HOST_LOST``.

    An initializer that raises ends the worker before it serves (the parent
    raises ``WorkerStartError``); its traceback goes to stderr.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if setup.switch_interval is not None:
        sys.setswitchinterval(setup.switch_interval)
    if setup.memory_limit is not None:
        apply_memory_limit(setup.memory_limit)
    if setup.initializer is not None:
        initializer, args = cloudpickle.loads(setup.initializer)
        initializer(*args)
    _Worker(conn, io_named(setup.io), setup.memory_limit).run()
    _leave_stuck_threads(_EXIT_GRACE)


def _leave_stuck_threads(grace: float) -> None:
    """End the process at once if a thread of it has not ended within ``grace`` seconds.

    multiprocessing joins every non-daemon thread before a process exits, so a
    session thread stuck in a tool or a ``session_end`` hook that never returns (its
    stop was already waited for, and given up) would keep the worker alive for ever,
    and a worker whose host was killed would never exit. What is left is abandoned,
    as a host abandons a session thread that does not stop.
    """
    deadline = time.monotonic() + grace
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join(max(deadline - time.monotonic(), 0.0))
    stuck = [t.name for t in threading.enumerate() if t is not me and t.is_alive() and not t.daemon]
    if not stuck:
        return  # the usual end: multiprocessing's own exit
    logger.warning("worker pid %s exits leaving threads that did not stop: %s", os.getpid(), stuck)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


class _Hosted:
    """What the worker keeps of one session.

    ``lock`` guards ``pending`` (ids of calls told to the session and not yet
    answered), ``running`` (the call it is handling) and ``batch`` (the events
    that call held back so far; ``None`` between calls). Frames about the
    session are written under ``lock`` too, so its events and replies reach the
    parent in the order they happened. ``end_reason`` is what its plugins'
    ``session_end`` gets when it stops: set before the stop is told to it.
    """

    __slots__ = (
        "batch",
        "end_reason",
        "lock",
        "pending",
        "ref",
        "running",
        "session_id",
        "steering",
    )

    def __init__(self, session_id: str, steering: SteeringQueue) -> None:
        self.session_id = session_id
        self.ref: pykka.ActorRef[Any] = None  # type: ignore[assignment]  # set once started
        self.steering = steering
        self.pending: set[int] = set()
        self.running: int | None = None
        self.lock = threading.Lock()
        self.batch: list[list[Any]] | None = None
        self.end_reason = "normal"


class _Relay(EventBuffer):
    """The event buffer of a session in a worker: relays each event to the parent, keeps none.

    The parent's buffer is the session's stream (it outlives this process);
    ``since`` here is always empty.
    """

    def __init__(self, worker: _Worker, hosted: _Hosted) -> None:
        super().__init__(1)
        self._worker = worker
        self._hosted = hosted

    def publish(self, type_: str, **data: Any) -> Event:
        hosted = self._hosted
        with hosted.lock:  # ``_Worker.relay``'s usual case, inlined: several per turn
            batch = hosted.batch
            if batch is not None:
                batch.append([type_, data])
        if batch is None:
            self._worker.relay(hosted, type_, data)
        # ``Event(...)`` without the Python-level ``__new__`` of named tuples.
        event: Event = tuple.__new__(Event, (0, type_, data, time.time()))
        return event

    def publish_all(self, events: Iterable[tuple[str, dict[str, Any]]]) -> None:
        for type_, data in events:
            self._worker.relay(self._hosted, type_, data)

    def publish_now(self, type_: str, **data: Any) -> Event:
        self._worker.relay_now(self._hosted, type_, data)
        return Event(0, type_, data, time.time())


class _Worker:
    """The worker's state. Its pipe is read on the main thread and by idle sessions
    (``WorkerPipe``), and written from any thread."""

    def __init__(self, conn: Connection, io: PipeIO, memory_limit: int | None = None) -> None:
        self.conn = conn
        self._memory_limit = memory_limit  # the worker's RLIMIT_AS, to explain running out
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()  # guards _sessions and _starting
        self._sessions: dict[str, _Hosted] = {}
        self._starting: dict[str, _Hosted] = {}
        self._templates: dict[str, tuple[AgentTemplate, Model]] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="worker-blocking")
        self.pipe = WorkerPipe(conn, self.route, io, self._poke)

    # -- the pipe ------------------------------------------------------------

    def _write(self, frame: dict[str, Any]) -> None:
        """Write a frame that may be shown altered (see ``pack_escaped``): anything but an
        answer, which ``answer`` encodes strictly."""
        self._send(pack_escaped(frame))

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            try:  # noqa: SIM105 (contextlib.suppress costs three Python calls per frame)
                write_frame(self.conn, data)
            except OSError:  # parent gone: nobody to tell
                pass

    def _poke(self) -> None:
        """Have the parent write a ``poke`` back: it ends a session's read of the pipe."""
        self._send(_POKE)

    def reply(self, call_id: int, payload: Any) -> None:
        """Answer a call that belongs to no session (or whose session has gone)."""
        self._write({"id": call_id, "ok": True, "payload": payload})

    def fail(self, call_id: int, exc: BaseException) -> None:
        """Fail a call (see ``reply``); a thread that could not start under the worker's
        memory limit is explained (``_memory_limit.explained``)."""
        error = explained(exc, self._memory_limit)
        self._write({"id": call_id, "ok": False, "error": encode_error(error)})

    def answer(self, hosted: _Hosted, frame: dict[str, Any]) -> None:
        """Write the reply ``frame`` of ``hosted``'s running call, with the events it held back.

        Raises:
            Exception: the answer's payload cannot be encoded (text with lone
                surrogates, an integer out of range, out of memory); an error or
                events that cannot are sent escaped. The call stays pending and its
                events held: the session must die, and its death answers the call
                (``SessionCrashed`` in the host, at once) and writes the events.
        """
        with hosted.lock:
            events = hosted.batch
            if events:
                frame["session"] = hosted.session_id
                frame["events"] = events
            data = _pack_answer(frame)
            hosted.pending.discard(frame["id"])
            hosted.running = None
            hosted.batch = None
            self._send(data)

    def relay(self, hosted: _Hosted, type_: str, data: dict[str, Any]) -> None:
        """An event of ``hosted``: held back while it handles a call, else written now."""
        with hosted.lock:
            batch = hosted.batch
            if batch is None:
                self._write(
                    {"op": "event", "session": hosted.session_id, "type": type_, "data": data}
                )
                return
            batch.append([type_, data])

    def relay_now(self, hosted: _Hosted, type_: str, data: dict[str, Any]) -> None:
        """An event a consumer waits for while the call runs (a streamed delta): written now,
        on the calling thread, in one frame after the events held back so far."""
        with hosted.lock:
            batch = hosted.batch
            if batch:
                batch.append([type_, data])
                hosted.batch = []
                events = batch
            else:
                events = [[type_, data]]
            self._write({"op": "events", "session": hosted.session_id, "events": events})

    def flush(self, hosted: _Hosted) -> None:
        """Write the events ``hosted`` held back so far (before a slow step of its call)."""
        with hosted.lock:
            self._write_held(hosted)

    def _write_held(self, hosted: _Hosted) -> None:
        """Write the events ``hosted`` held back so far (caller holds ``hosted.lock``)."""
        if hosted.batch:
            events = hosted.batch
            hosted.batch = []
            self._write({"op": "events", "session": hosted.session_id, "events": events})

    def run(self) -> None:
        stopped = False
        try:
            self._write({"op": "ready"})  # its absence tells the parent a worker could not start
            last = self.pipe.serve()
            if last is None:  # EOF without ``shutdown``: the host process is gone
                self._stop_all(HOST_LOST)
            else:
                self._stop_all()
                self.reply(last["id"], None)
            stopped = True
        finally:
            if not stopped:
                self._stop_all()
            # Not waited for: a start stuck in a ``session_start`` hook would hold the worker
            # for ever (``worker_main`` gives what is left a moment, then leaves it).
            self._pool.shutdown(wait=False, cancel_futures=True)
            self.pipe.close()

    def route(self, frame: dict[str, Any], hosted: _Hosted | None) -> _Call | None:
        """Act on a frame; a call for ``hosted`` is returned instead, for its own thread."""
        call_id, op = frame["id"], frame["op"]
        payload: Any = frame.get("payload")
        try:
            if (
                hosted is not None
                and op in _SESSION_CALLS
                and payload["session"] == hosted.session_id
            ):
                with hosted.lock:
                    hosted.pending.add(call_id)
                call: _Call = tuple.__new__(_Call, (call_id, op, payload))  # no Python __new__
                return call
            self._dispatch(call_id, op, payload)
        except Exception as exc:
            self.fail(call_id, exc)
        return None

    def _dispatch(self, call_id: int, op: str, payload: Any) -> None:
        if op == "load_template":  # imports, which may take long: not on the reading thread
            self._pool.submit(self._blocking, call_id, self._load, payload)
        elif op == "unload_template":  # no session here uses it any more (nor starts on it)
            self._templates.pop(payload["key"], None)
            self.reply(call_id, None)
        elif op == "start":
            hosted = self._starting_session(payload)
            self._pool.submit(self._blocking, call_id, self._start, hosted, payload)
        elif op == "stop":
            self._pool.submit(
                self._blocking,
                call_id,
                self._stop,
                payload["session"],
                bool(payload.get("abnormal", False)),
            )
        elif op == "steer":
            self._steer(call_id, payload["session"], payload["text"])
        elif op in _SESSION_CALLS:
            self._tell(payload["session"], _Call(call_id, op, payload))
        else:
            raise ValueError(f"unknown worker op {op!r}")

    def _blocking(self, call_id: int, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self.fail(call_id, exc)
        else:
            self.reply(call_id, None)

    def _load(self, payload: dict[str, Any]) -> None:
        """Load a template; the parent writes no ``start`` on it before the reply."""
        self._templates[payload["key"]] = _load_template(payload)

    # -- sessions --------------------------------------------------------------

    def _tell(self, session_id: str, call: _Call) -> None:
        with self._lock:
            hosted = self._sessions.get(session_id)
        if hosted is None:  # it ended here (killed, stopped): the parent retries elsewhere
            self._write(_down_reply(call.id, f"no session {session_id!r} here", started=False))
            return
        with hosted.lock:
            hosted.pending.add(call.id)
        try:
            hosted.ref.tell(call)
        except pykka.ActorDeadError:
            with hosted.lock:
                hosted.pending.discard(call.id)
            self._write(_down_reply(call.id, "the session is no longer running", started=False))

    def _steer(self, call_id: int, session_id: str, text: str) -> None:
        """Queue steering for a running or starting session; refuse it for one that is gone."""
        with self._lock:
            hosted = self._sessions.get(session_id) or self._starting.get(session_id)
        if hosted is None:  # it ended here; the parent keeps the text for its next incarnation
            self._write(_down_reply(call_id, f"no session {session_id!r}", started=False))
            return
        hosted.steering.put(text)
        self.reply(call_id, None)

    def _starting_session(self, payload: dict[str, Any]) -> _Hosted:
        """What a ``start`` creates at once, on the reader thread: steering sent right after
        the ``start`` (the parent forwards from then on) waits in its queue."""
        options: dict[str, Any] = payload["options"]
        steering = SteeringQueue(options["max_steering_queue"])
        steering.requeue(list(options.get("steering", [])))
        hosted = _Hosted(payload["session"], steering)
        with self._lock:
            self._starting[hosted.session_id] = hosted
        return hosted

    def _start(self, hosted: _Hosted, payload: dict[str, Any]) -> None:
        try:
            self._start_session(hosted, payload)
        finally:
            with self._lock:
                if self._starting.get(hosted.session_id) is hosted:
                    del self._starting[hosted.session_id]

    def _start_session(self, hosted: _Hosted, payload: dict[str, Any]) -> None:
        session_id = hosted.session_id
        template, model = self._templates[payload["key"]]
        options: dict[str, Any] = payload["options"]
        restore: dict[str, Any] | None = payload["restore"]
        ref = _RemoteSession.start(
            template,
            worker=self,
            hosted=hosted,
            checkpoints=options["checkpoint_every"] is not None,
            session_id=session_id,
            restored_state=None if restore is None else restore["state"],
            restored_checked=restore is not None and restore.get("checked") is True,
            stripped_fields=() if restore is None else tuple(restore["stripped"]),
            model=model,
            max_steps=options["max_steps"],
            metadata=options.get("metadata"),
            steering=hosted.steering,
            event_buffer=_Relay(self, hosted),
            checkpoint_every=options["checkpoint_every"] or 1,
            credentials=_credentials(options.get("credentials")),
            epoch=options.get("epoch", 0),
        )
        hosted.ref = ref
        with self._lock:
            self._sessions[session_id] = hosted
        monitor(ref, functools.partial(self._on_down, session_id, hosted))

    def _on_down(self, session_id: str, hosted: _Hosted, down: Down) -> None:
        """A session actor exited (on its dying thread): fail its waiting calls, tell the parent."""
        with self._lock:
            if self._sessions.get(session_id) is hosted:
                del self._sessions[session_id]
        with hosted.lock:
            self._write_held(hosted)  # what the dying call published, before its failure
            hosted.batch = None
            pending, hosted.pending = hosted.pending, set()
            for call_id in sorted(pending):
                started = call_id == hosted.running
                self._write(_down_reply(call_id, repr(down.reason), started=started))
            if is_abnormal(down.reason):
                self._write({"op": "down", "session": session_id, "reason": repr(down.reason)})

    def _stop(self, session_id: str, abnormal: bool = False) -> None:
        """Stop a session: a shutdown, or (its proxy crashed) a kill, as in thread mode."""
        with self._lock:
            hosted = self._sessions.get(session_id)
        if hosted is None:
            return
        if not abnormal:
            terminate(hosted.ref, _STOP_TIMEOUT)
            return
        kill(hosted.ref, "its proxy in the parent crashed")
        lifecycle = lifecycle_of(hosted.ref)
        if lifecycle is not None:
            lifecycle.finished.wait(_STOP_TIMEOUT)

    def _stop_all(self, reason: str = "normal") -> None:
        """Stop every session; their plugins' ``session_end`` gets ``reason``. All are told
        at once and waited for together, up to ``_STOP_TIMEOUT`` in all: a session that
        does not stop is abandoned, and costs the others nothing."""
        with self._lock:
            hosted = list(self._sessions.values())
        ending = []
        for each in hosted:
            each.end_reason = reason  # before the stop message: the actor reads it after
            ending.append(begin_terminate(each.ref))
        deadline = time.monotonic() + _STOP_TIMEOUT
        for lifecycle in ending:
            lifecycle.finished.wait(max(deadline - time.monotonic(), 0.0))


def _pack_answer(frame: dict[str, Any]) -> bytes:
    """A reply frame, encoded: an answer's payload exactly or not at all (it raises), while
    an error and the events the call held back may go escaped (see ``pack_escaped``)."""
    try:
        return pack(frame)
    except Exception:
        if frame.get("ok"):
            pack({"payload": frame.get("payload")})  # raises if the answer itself cannot go
        return pack_escaped(frame)  # escaping leaves encodable text as it is


def _load_template(payload: dict[str, Any]) -> tuple[AgentTemplate, Model]:
    """The template and model of a ``load_template`` frame, unpickled.

    Unpickling imports by name the modules of the template's classes and
    functions (cloudpickle sends only the main file's by value), with the
    ``sys.path`` the host had when its workers' server started. Whatever that
    raises, ``SystemExit`` included (a script's top-level ``argparse`` error),
    fails the load alone: it must not end the worker, whose other sessions are
    fine (nor the next worker a start tried after it).

    Raises:
        TemplateNotLoadable: naming the template (``payload["about"]``, the host's
            description of it), this worker and the error, which is its cause.
    """
    try:
        template = cloudpickle.loads(payload["template"])
        model = cloudpickle.loads(payload["model"]) if payload["model"] else template.model
    except BaseException as exc:  # (see above: the import's error is the answer)
        about = payload.get("about") or "not described by the host"
        raise TemplateNotLoadable(str(about), os.getpid(), exc) from exc
    return template, model


def _credentials(plain: dict[str, Any] | None) -> Credentials | None:
    """The tenant's credentials as the ``start`` frame carried them."""
    if plain is None:
        return None
    return Credentials(api_key=plain.get("api_key"), headers=plain.get("headers") or {})


def _down_reply(call_id: int, reason: str, *, started: bool) -> dict[str, Any]:
    error = {"type": SESSION_DOWN, "message": reason, "args": [started]}
    return {"id": call_id, "ok": False, "error": error}


class _RemoteSession(SupervisedActor, AgentSession):
    """An ``AgentSession`` that answers ``_Call`` requests on the worker's pipe.

    Runs on its own actor thread, like a session in thread mode: every hook and
    tool of one session runs on that one thread. A checkpoint due after a turn
    is captured (``DeltaWriter``: the messages the parent lacks, and the rest as bytes)
    and returned with the answer; the parent saves it
    before ``send`` returns there. Until its next ``send`` the session keeps
    what that turn changed (``_undo``): if the parent's save fails, the parent
    sends ``rollback``, which this session runs before any later call (the
    pipe is read in order), so the turn is undone as in thread mode. Its model
    and tools (the template's and those its plugins offer at start, through
    ``_wrap_tool``) are wrapped to write the events held back so far before a
    slow step (see the module docstring); a tool's ``MemoryError`` ends the
    worker (``MEMORY_EXIT``).
    """

    @staticmethod
    def _create_actor_inbox() -> Any:
        return PipeInbox()

    def __init__(
        self, *args: Any, worker: _Worker, hosted: _Hosted, checkpoints: bool, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        inbox: PipeInbox = self.actor_inbox  # type: ignore[assignment]  # _create_actor_inbox's
        inbox.bind(worker.pipe, hosted)
        self._inbox = inbox
        self._worker = worker
        self._hosted = hosted
        self._flush = flush = functools.partial(worker.flush, hosted)
        self._call_model = _Step(self._call_model, flush)
        self.tools = {name: self._wrap_tool(t) for name, t in self.tools.items()}
        self._captured: dict[str, Any] | None = None
        self._deltas = DeltaWriter()
        self._host_has: object = None  # what the call being answered says the host has
        self._captured_steered: list[str] = []
        self._undo: tuple[Any, list[str]] | None = None
        self.checkpointer = self._capture if checkpoints else None

    def _wrap_tool(self, tool: Tool) -> Tool:
        # Every tool, the template's (from ``__init__``) and the plugins' (at start).
        return dataclasses.replace(tool, fn=_Step(_fatal_on_memory_error(tool.fn), self._flush))

    def _capture(self, snapshot: Snapshot) -> None:
        self._captured = self._deltas.capture(snapshot, self._host_has)  # what the host lacks
        self._captured_steered = list(self._steered)  # cleared once ``send`` returns

    def on_stop(self) -> None:
        # As ``AgentSession.on_stop``, with the reason the worker chose (``HOST_LOST``
        # when its host vanished).
        self.plugins.end(self._hosted.end_reason)

    def _handle_receive(self, message: Any) -> Any:
        # A ``_Call`` is nearly every message: answer it before Pykka's own checks (for
        # its proxy messages and stop), four ``isinstance`` tests per call.
        if message.__class__ is _Call:
            return self._serve(message)
        return super()._handle_receive(message)

    def on_receive(self, message: Any) -> Any:
        if message.__class__ is _Call:
            return self._serve(message)
        return super().on_receive(message)

    def _serve(self, call: _Call) -> None:
        """Run ``call`` and write its answer, with the events it held back."""
        hosted = self._hosted
        with hosted.lock:
            hosted.running = call.id
            hosted.batch = []
        try:
            result = self._answer(call)
        except Exception as exc:
            frame = {"id": call.id, "ok": False, "error": encode_error(exc)}
        else:
            frame = {"id": call.id, "ok": True, "payload": result}
        self._inbox.hold_next()
        try:
            self._worker.answer(hosted, frame)
        except BaseException:
            self._inbox.let_go()  # it dies now: the worker's main thread reads again
            raise

    def _answer(self, call: _Call) -> Any:
        if call.op == "send":
            self._captured, self._undo = None, None
            self._host_has = call.payload.get("have")
            mark = None if self.checkpointer is None else self._mark()  # for ``rollback``
            answer = self.send(call.payload["text"], tag=call.payload.get("tag"))
            checkpoint, self._captured = self._captured, None
            if mark is not None and checkpoint is not None:  # the parent may fail to save
                self._undo = (mark, self._captured_steered)  # it: keep the way back
            return {"message": answer.to_dict(), "checkpoint": checkpoint}
        if call.op == "rollback":
            undo, self._undo = self._undo, None
            if undo is not None:
                self._steered = undo[1]
                self._rollback(undo[0])
            return None
        if call.op == "snapshot":
            snapshot = self.snapshot(call.payload.get("label"))
            return self._deltas.capture(snapshot, call.payload.get("have"))
        return [m.to_dict() for m in self.history()]


class _Step:
    """A session's model call or a tool's function that flushes held-back events before it
    runs, when it was slow last time (or has not run yet). Used on one session's thread."""

    __slots__ = ("_flush", "_fn", "_slow")

    def __init__(self, fn: Callable[..., Any], flush: Callable[[], None]) -> None:
        self._fn = fn
        self._flush = flush
        self._slow = True  # unknown yet: assume slow

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._slow:
            self._flush()
        started = time.perf_counter()
        try:
            return self._fn(*args, **kwargs)
        finally:
            self._slow = time.perf_counter() - started > SLOW_STEP
