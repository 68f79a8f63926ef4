"""The worker process's server: hosts many ``AgentSession`` actors behind one pipe.

Its reader loop (the process's main thread) takes frames off the pipe (schema in
``supervisor.workers._protocol``) and never blocks on a session: calls on a
session are *told* to its actor (``RemoteSession``), which replies on the pipe
itself when it has finished; ``load_template`` (which imports the template's
modules), ``start`` and ``stop`` (which wait for plugin hooks) run on a small
thread pool; ``steer`` goes straight into the session's steering queue so it
reaches a turn that is already running.

An idle session reads the pipe itself while no other thread does, so a call
for it runs without a hand-off from the main thread (see
``supervisor.workers._worker_pipe``). Frames are read by one thread at a time,
in order.

A session that dies (a tool raising ``SystemExit``, a kill) fails every call
that was waiting on it, and an abnormal death pushes a ``down`` frame so the
parent crashes the session's proxy with that reason.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import pykka

from actors import AgentTemplate, Credentials, Model, SteeringQueue
from supervisor._actor import begin_terminate, kill, terminate
from supervisor._lifecycle import Down, is_abnormal, lifecycle_of
from supervisor.errors import TemplateNotLoadable
from supervisor.monitors import monitor
from supervisor.workers._frame_writer import EventRelay, FrameWriter
from supervisor.workers._hosted_session import SESSION_CALLS, Call, HostedSession, down_reply
from supervisor.workers._io import PipeIO
from supervisor.workers._remote_session import RemoteSession
from supervisor.workers._worker_pipe import WorkerPipe

__all__ = ["HOST_LOST", "STOP_TIMEOUT", "WorkerServer"]

STOP_TIMEOUT = 10.0
"""Seconds a stop (one session's, or all of them together) waits for the sessions to end."""

HOST_LOST = "host_lost"
"""The ``session_end`` reason of sessions a worker stops because its host is gone (its pipe
ended without a ``shutdown`` frame: the host process was killed or crashed). Plugins learn
that no final checkpoint was taken, unlike ``normal``."""


class WorkerServer:
    """The worker's state. Its pipe is read on the main thread and by idle sessions
    (``WorkerPipe``), and written from any thread (``FrameWriter``)."""

    def __init__(self, conn: Connection, io: PipeIO, memory_limit: int | None = None) -> None:
        self.conn = conn
        self.writer = FrameWriter(conn, memory_limit)
        self._lock = threading.Lock()  # guards _sessions and _starting
        self._sessions: dict[str, HostedSession] = {}
        self._starting: dict[str, HostedSession] = {}
        self._templates: dict[str, tuple[AgentTemplate, Model]] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="worker-blocking")
        self.pipe = WorkerPipe(conn, self.route, io, self.writer.poke)

    def run(self) -> None:
        """Serve the pipe until ``shutdown`` or its end, then stop every session."""
        stopped = False
        try:
            self.writer.write({"op": "ready"})  # its absence: a worker could not start
            last = self.pipe.serve()
            if last is None:  # EOF without ``shutdown``: the host process is gone
                self._stop_all(HOST_LOST)
            else:
                self._stop_all()
                self.writer.reply(last["id"], None)
            stopped = True
        finally:
            if not stopped:
                self._stop_all()
            # Not waited for: a start stuck in a ``session_start`` hook would hold the worker
            # for ever (``worker_main`` gives what is left a moment, then leaves it).
            self._pool.shutdown(wait=False, cancel_futures=True)
            self.pipe.close()

    def route(self, frame: dict[str, Any], hosted: HostedSession | None) -> Call | None:
        """Act on a frame; a call for ``hosted`` is returned instead, for its own thread."""
        call_id, op = frame["id"], frame["op"]
        payload: Any = frame.get("payload")
        try:
            if (
                hosted is not None
                and op in SESSION_CALLS
                and payload["session"] == hosted.session_id
            ):
                with hosted.lock:
                    hosted.pending.add(call_id)
                call: Call = tuple.__new__(Call, (call_id, op, payload))  # no Python __new__
                return call
            self._dispatch(call_id, op, payload)
        except Exception as exc:
            self.writer.fail(call_id, exc)
        return None

    def _dispatch(self, call_id: int, op: str, payload: Any) -> None:
        if op == "load_template":  # imports, which may take long: not on the reading thread
            self._pool.submit(self._blocking, call_id, self._load, payload)
        elif op == "unload_template":  # no session here uses it any more (nor starts on it)
            self._templates.pop(payload["key"], None)
            self.writer.reply(call_id, None)
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
        elif op in SESSION_CALLS:
            self._tell(payload["session"], Call(call_id, op, payload))
        else:
            raise ValueError(f"unknown worker op {op!r}")

    def _blocking(self, call_id: int, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` (a load, start or stop, on the thread pool) and answer ``call_id``.

        Whatever ``fn`` raises is the answer, ``SystemExit`` and ``KeyboardInterrupt``
        included (user code run while a session is constructed: a model's attribute, a
        plugin's): unanswered, the host would wait out its timeout for the start, and
        its supervisor would stay busy with it. It cannot stop this pool thread's
        worker anyway; the host rebuilds it as a ``RemoteError`` naming its type.
        """
        try:
            fn(*args)
        except BaseException as exc:  # (see above: the error is the answer)
            self.writer.fail(call_id, exc)
        else:
            self.writer.reply(call_id, None)

    def _load(self, payload: dict[str, Any]) -> None:
        """Load a template; the parent writes no ``start`` on it before the reply."""
        self._templates[payload["key"]] = load_template(payload)

    # -- sessions --------------------------------------------------------------

    def _tell(self, session_id: str, call: Call) -> None:
        with self._lock:
            hosted = self._sessions.get(session_id)
        if hosted is None:  # it ended here (killed, stopped): the parent retries elsewhere
            self.writer.write(down_reply(call.id, f"no session {session_id!r} here", started=False))
            return
        with hosted.lock:
            hosted.pending.add(call.id)
        try:
            hosted.ref.tell(call)
        except pykka.ActorDeadError:
            with hosted.lock:
                hosted.pending.discard(call.id)
            self.writer.write(
                down_reply(call.id, "the session is no longer running", started=False)
            )

    def _steer(self, call_id: int, session_id: str, text: str) -> None:
        """Queue steering for a running or starting session; refuse it for one that is gone."""
        with self._lock:
            hosted = self._sessions.get(session_id) or self._starting.get(session_id)
        if hosted is None:  # it ended here; the parent keeps the text for its next incarnation
            self.writer.write(down_reply(call_id, f"no session {session_id!r}", started=False))
            return
        hosted.steering.put(text)
        self.writer.reply(call_id, None)

    def _starting_session(self, payload: dict[str, Any]) -> HostedSession:
        """What a ``start`` creates at once, on the reader thread: steering sent right after
        the ``start`` (the parent forwards from then on) waits in its queue."""
        options: dict[str, Any] = payload["options"]
        steering = SteeringQueue(options["max_steering_queue"])
        steering.requeue(list(options.get("steering", [])))
        hosted = HostedSession(payload["session"], steering)
        with self._lock:
            self._starting[hosted.session_id] = hosted
        return hosted

    def _start(self, hosted: HostedSession, payload: dict[str, Any]) -> None:
        try:
            self._start_session(hosted, payload)
        finally:
            with self._lock:
                if self._starting.get(hosted.session_id) is hosted:
                    del self._starting[hosted.session_id]

    def _start_session(self, hosted: HostedSession, payload: dict[str, Any]) -> None:
        session_id = hosted.session_id
        template, model = self._templates[payload["key"]]
        options: dict[str, Any] = payload["options"]
        restore: dict[str, Any] | None = payload["restore"]
        ref = RemoteSession.start(
            template,
            pipe=self.pipe,
            writer=self.writer,
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
            event_buffer=EventRelay(self.writer, hosted),
            checkpoint_every=options["checkpoint_every"] or 1,
            credentials=_credentials(options.get("credentials")),
            epoch=options.get("epoch", 0),
        )
        hosted.ref = ref
        with self._lock:
            self._sessions[session_id] = hosted
        monitor(ref, functools.partial(self._on_down, session_id, hosted))

    def _on_down(self, session_id: str, hosted: HostedSession, down: Down) -> None:
        """A session actor exited (on its dying thread): fail its waiting calls, tell the parent."""
        with self._lock:
            if self._sessions.get(session_id) is hosted:
                del self._sessions[session_id]
        writer = self.writer
        with hosted.lock:
            writer.write_held(hosted)  # what the dying call published, before its failure
            hosted.batch = None
            pending, hosted.pending = hosted.pending, set()
            for call_id in sorted(pending):
                started = call_id == hosted.running
                writer.write(down_reply(call_id, repr(down.reason), started=started))
            if is_abnormal(down.reason):
                writer.write({"op": "down", "session": session_id, "reason": repr(down.reason)})

    def _stop(self, session_id: str, abnormal: bool = False) -> None:
        """Stop a session: a shutdown, or (its proxy crashed) a kill, as in thread mode."""
        with self._lock:
            hosted = self._sessions.get(session_id)
        if hosted is None:
            return
        if not abnormal:
            terminate(hosted.ref, STOP_TIMEOUT)
            return
        kill(hosted.ref, "its proxy in the parent crashed")
        lifecycle = lifecycle_of(hosted.ref)
        if lifecycle is not None:
            lifecycle.finished.wait(STOP_TIMEOUT)

    def _stop_all(self, reason: str = "normal") -> None:
        """Stop every session; their plugins' ``session_end`` gets ``reason``. All are told
        at once and waited for together, up to ``STOP_TIMEOUT`` in all: a session that
        does not stop is abandoned, and costs the others nothing."""
        with self._lock:
            hosted = list(self._sessions.values())
        ending = []
        for each in hosted:
            each.end_reason = reason  # before the stop message: the actor reads it after
            ending.append(begin_terminate(each.ref))
        deadline = time.monotonic() + STOP_TIMEOUT
        for lifecycle in ending:
            lifecycle.finished.wait(max(deadline - time.monotonic(), 0.0))


def load_template(payload: dict[str, Any]) -> tuple[AgentTemplate, Model]:
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
