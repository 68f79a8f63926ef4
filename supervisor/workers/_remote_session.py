"""A session actor inside a worker process: it answers the host's calls on the pipe itself.

Sessions run as ``SupervisedActor`` subclasses of ``AgentSession``: a tool
raising ``SystemExit`` kills its session alone (the worker then fails every call
that was waiting on it and tells the parent, see ``_worker_server``). A
``MemoryError`` in a tool is fatal to the whole worker (``MEMORY_EXIT``).

Before a slow step (a model call or a tool that took longer than ``SLOW_STEP``
the last time, or has not run yet) the events the call held back so far are
written on their own (``FrameWriter.flush``), so a consumer watching the stream
still sees them while that step runs. No timer or extra thread is involved: a
fast step costs two clock reads.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

from actors import AgentSession, Snapshot, Tool
from supervisor._actor import SupervisedActor
from supervisor.workers._checkpoint_delta import DeltaWriter
from supervisor.workers._frame_writer import FrameWriter
from supervisor.workers._hosted_session import Call, HostedSession
from supervisor.workers._memory_limit import fatal_on_memory_error
from supervisor.workers._protocol import encode_error
from supervisor.workers._worker_pipe import PipeInbox, WorkerPipe

__all__ = ["SLOW_STEP", "RemoteSession"]

SLOW_STEP = 0.001
"""Seconds after which a model call or tool counts as slow: its events go out before it."""


class RemoteSession(SupervisedActor, AgentSession):
    """An ``AgentSession`` that answers ``Call`` requests on the worker's pipe.

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
        self,
        *args: Any,
        pipe: WorkerPipe,
        writer: FrameWriter,
        hosted: HostedSession,
        checkpoints: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        inbox: PipeInbox = self.actor_inbox  # type: ignore[assignment]  # _create_actor_inbox's
        inbox.bind(pipe, hosted)
        self._inbox = inbox
        self._writer = writer
        self._hosted = hosted
        self._flush = flush = functools.partial(writer.flush, hosted)
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
        return dataclasses.replace(tool, fn=_Step(fatal_on_memory_error(tool.fn), self._flush))

    def _capture(self, snapshot: Snapshot) -> None:
        self._captured = self._deltas.capture(snapshot, self._host_has)  # what the host lacks
        self._captured_steered = list(self._steered)  # cleared once ``send`` returns

    def on_stop(self) -> None:
        # As ``AgentSession.on_stop``, with the reason the worker chose (``HOST_LOST``
        # when its host vanished).
        self.plugins.end(self._hosted.end_reason)

    def _handle_receive(self, message: Any) -> Any:
        # A ``Call`` is nearly every message: answer it before Pykka's own checks (for
        # its proxy messages and stop), four ``isinstance`` tests per call.
        if message.__class__ is Call:
            return self._serve(message)
        return super()._handle_receive(message)

    def on_receive(self, message: Any) -> Any:
        if message.__class__ is Call:
            return self._serve(message)
        return super().on_receive(message)

    def _serve(self, call: Call) -> None:
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
            self._writer.answer(hosted, frame)
        except BaseException:
            self._inbox.let_go()  # it dies now: the worker's main thread reads again
            raise

    def _answer(self, call: Call) -> Any:
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
