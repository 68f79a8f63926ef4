"""Tools and helpers for the worker-process tests.

Tools defined at module level are imported by reference in the workers, so
this module must import cheaply and have no side effects. Tools report back to
the test only through what the host carries across processes: events,
history and checkpoints.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors import (
    AgentTemplate,
    EchoModel,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    Tool,
    tool,
)
from supervisor import AgentHost, SessionNotFound
from supervisor.workers._remote_session import SLOW_STEP
from tests.supervisor.host_helpers import WAIT, EventWaiter, poll_until, watch_events

__all__ = [
    "RATE_LIMIT_BODY",
    "WAIT",
    "APIStatusError",
    "EventWaiter",
    "FailingStart",
    "FakeResponse",
    "FifoModel",
    "HangingEnd",
    "Holder",
    "LoadCounter",
    "RateLimitError",
    "RateLimitedModel",
    "boom",
    "burn",
    "burn_together",
    "crash_template",
    "entry_escaping_off",
    "evicted_or_resumed",
    "fds",
    "forking_hang",
    "hang",
    "hog",
    "quit_process",
    "segfault",
    "sessions_on",
    "sleepy_segfault",
    "undecodable_listing",
    "watch_events",
    "worker_pid",
]


@tool
def segfault() -> str:
    """Read address 0: the worker dies with SIGSEGV."""
    return str(ctypes.string_at(0))


@tool
def sleepy_segfault(seconds: float) -> str:
    """Work for ``seconds`` (a tool's own latency), then read address 0: SIGSEGV."""
    threading.Event().wait(seconds)
    return str(ctypes.string_at(0))


@tool
def undecodable_listing() -> str:
    """A file name as ``os.listdir`` gives it for bytes that are not UTF-8."""
    return "report-\udcff.txt"


def entry_escaping_off() -> None:
    """A ``worker_initializer``: the worker's sessions keep text as tools return it (as if
    ``actors._storable`` had missed a case), so an answer can hold what no frame can carry."""
    import actors._tool_text  # noqa: PLC0415 (the worker's own copy)
    import actors.session  # noqa: PLC0415

    actors._tool_text.storable_text = lambda text: text  # type: ignore[attr-defined]
    actors.session.storable_message = lambda message: (message, {})  # type: ignore[attr-defined]


@tool
def quit_process() -> str:
    """Leave the worker process at once, without cleanup."""
    os._exit(1)


@tool
def hog(mb: int) -> int:
    """Allocate ``mb`` megabytes (past the worker's memory limit)."""
    block = bytearray(mb * 1024 * 1024)
    return len(block)


@tool
def hang() -> str:
    """Block the session for a long time (the test kills the worker meanwhile)."""
    threading.Event().wait(30)
    return "woke up"


def forking_hang(directory: Path) -> Tool:
    """A tool ``fork_and_hang()`` that forks a child, which inherits the worker's end of
    its pipe and keeps it open until it is killed, writes the child's pid to
    ``directory/child``, then blocks as ``hang`` does."""

    def fork_and_hang() -> str:
        """Fork a child that keeps the worker's files open, then block."""
        pid = os.fork()
        if pid == 0:  # the child: only system calls here, then exit without cleanup
            try:
                signal.pause()
            finally:
                os._exit(0)
        (directory / "child.tmp").write_text(str(pid))
        (directory / "child.tmp").rename(directory / "child")  # whole, or not there
        threading.Event().wait(30)
        return "woke up"

    return tool(fork_and_hang)


@tool
def burn(n: int) -> int:
    """CPU-bound: sum of squares below ``n``, in pure Python."""
    total = 0
    for i in range(n):
        total += i * i
    return total


def burn_together(directory: Path) -> Tool:
    """A CPU-bound tool ``burn_together(me, peer, n)`` that first meets its peer call.

    It creates the file ``directory/<me>`` and waits (up to ``WAIT``) for
    ``directory/<peer>``, which the peer call creates: a barrier across
    processes. Once both met, each call is known to have started before the
    other ended. It then runs ``burn(n)`` and returns what it saw: its ``pid``,
    whether it ``met`` the peer in time, the CPU seconds its thread used
    (``cpu``, ``time.thread_time``), and its ``start`` and ``end`` on
    ``time.monotonic`` (a system-wide clock on Linux: comparable across processes).
    """

    @tool
    def burn_together(me: str, peer: str, n: int) -> dict[str, Any]:
        """Meet the peer call, then burn CPU; report pid, CPU time and interval."""
        start = time.monotonic()
        (directory / me).touch()
        met = poll_until((directory / peer).exists, WAIT)
        cpu = time.thread_time()
        burn(n=n)
        return {
            "pid": os.getpid(),
            "met": met,
            "cpu": time.thread_time() - cpu,
            "start": start,
            "end": time.monotonic(),
        }

    return burn_together


@tool
def boom() -> str:
    """An ordinary exception: a tool message with the error, never a crash."""
    raise ValueError("tool failed on purpose")


def crash_template() -> AgentTemplate:
    """Echo model with every tool of this module."""
    return AgentTemplate(tools=(segfault, quit_process, hog, hang, burn, boom))


def worker_pid(host: AgentHost, session_id: str) -> int:
    """Pid of the live worker process running ``session_id``."""
    pids = [w.pid for w in host.workers() if session_id in w.sessions]
    assert len(pids) == 1, f"session {session_id!r} is on workers {pids}: {host.workers()}"
    return pids[0]


def sessions_on(host: AgentHost, pid: int, session_ids: list[str]) -> list[str]:
    """The sessions of ``session_ids`` placed on worker ``pid``."""
    placed = {sid for w in host.workers() if w.pid == pid for sid in w.sessions}
    return [sid for sid in session_ids if sid in placed]


def fds() -> set[str]:
    """Open file descriptors of this process."""
    return set(os.listdir("/proc/self/fd"))


def evicted_or_resumed(host: AgentHost, session_id: str, waiter: EventWaiter) -> bool:
    """Whether the registry dropped the session, or it was already resumed after a crash."""
    try:
        host.registry.get(session_id)
    except SessionNotFound:
        return True
    return waiter.count("crashed") >= 1


class FailingStart(Plugin):
    """A picklable plugin whose ``session_start`` always raises."""

    name = "starter"

    def session_start(self, ctx: PluginContext) -> None:
        raise RuntimeError("storage unavailable")


class Holder(Plugin):
    """A plugin holding whatever the test gives it (an open socket: not picklable)."""

    name = "holder"

    def __init__(self, resource: object) -> None:
        self.resource = resource


class HangingEnd(Plugin):
    """A plugin whose ``session_end`` never returns: the session cannot be stopped."""

    name = "hanging-end"

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        threading.Event().wait()


class LoadCounter(Plugin):
    """A plugin that appends a line to ``path`` each time a process unpickles it: how
    often the template holding it was shipped to (loaded in) a worker."""

    name = "load-counter"

    def __init__(self, path: Path) -> None:
        self.path = path

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        with self.path.open("a") as out:
            out.write(f"{os.getpid()}\n")

    def loads(self) -> list[int]:
        """The pids of the processes that unpickled it, in order."""
        if not self.path.exists():
            return []
        return [int(line) for line in self.path.read_text().split()]


class FifoModel(EchoModel):
    """``EchoModel`` whose every call first waits for one byte on a named pipe.

    A rendezvous that works across processes: the model blocks in the kernel
    (no polling) until the test writes to the pipe. It then takes a little
    longer than ``SLOW_STEP``, like any remote model, so that it counts as slow
    however fast the test releases it.
    """

    model_string = "fifo-echo"

    def __init__(self, path: str) -> None:
        self.path = path

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        with open(self.path, "rb", buffering=0) as fifo:  # unbuffered: one byte per call
            fifo.read(1)
        threading.Event().wait(SLOW_STEP * 2)  # the provider's own latency
        return super().generate(messages, tools)


class FakeResponse:
    """A live HTTP response as an SDK error holds one (not plain data: it stays in a worker)."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.headers = {"x-request-id": "req-1"}


class APIStatusError(Exception):
    """Shaped like ``openai.APIStatusError``: keyword-only ``__init__`` arguments, so
    ``cls(*exc.args)`` cannot build it again, and a live ``response`` attribute."""

    def __init__(self, message: str, *, response: FakeResponse, body: object) -> None:
        super().__init__(message)
        self.message = message
        self.response: FakeResponse | None = response
        self.body = body
        self.status_code = response.status_code


class RateLimitError(APIStatusError):
    """Shaped like ``openai.RateLimitError``: what a provider raises for HTTP 429."""


RATE_LIMIT_BODY: dict[str, Any] = {
    "error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
}
"""The ``body`` of the ``RateLimitError`` that ``RateLimitedModel`` raises."""


class RateLimitedModel(EchoModel):
    """``EchoModel`` that raises ``RateLimitError`` (HTTP 429) for user text ``!429``."""

    model_string = "rate-limited-echo"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        if messages and messages[-1].role == "user" and messages[-1].content == "!429":
            raise RateLimitError(
                "Error code: 429 - Rate limit reached",
                response=FakeResponse(429),
                body=RATE_LIMIT_BODY,
            )
        return super().generate(messages, tools)
