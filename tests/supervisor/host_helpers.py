"""Real plugins, tools, models and waiters shared by the ``AgentHost`` tests.

Fakes, never mocks, and never a sleep: every wait is on a condition or an
event, with a bound (``WAIT``).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors import (
    AgentTemplate,
    EchoModel,
    Event,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    Tool,
    tool,
)
from supervisor import AgentHost, SessionNotFound

__all__ = [
    "WAIT",
    "EventWaiter",
    "FlakyModel",
    "Gate",
    "Journal",
    "ModelDown",
    "StartSeen",
    "add",
    "assert_threads_back",
    "blocking_tool",
    "exit_tool",
    "pairs",
    "registry_lookup_fails",
    "session_thread_gone",
    "template",
    "watch_events",
]

WAIT = 5.0
"""Upper bound of every wait in these tests (seconds)."""


@dataclass(frozen=True, slots=True)
class StartSeen:
    """What one ``session_start`` of the ``Journal`` plugin saw."""

    session_id: str
    resumed: bool
    stripped: tuple[str, ...]
    turns_seen: int
    handle_was: object
    thread: threading.Thread


class Journal(Plugin):
    """A plugin holding a live value in its state, as real plugins hold connections.

    ``state["handle"]`` is an open file under ``directory`` (when given) or a
    ``threading.Lock``: both are stripped from snapshots, so on resume
    ``session_start`` sees ``"handle"`` in ``ctx.stripped`` and rebuilds it.
    ``state["turns_seen"]`` counts completed turns (plain, persisted). Every
    start is recorded; ``broken`` makes a *resumed* start raise (a plugin whose
    resource cannot be rebuilt). Shared by many sessions: thread-safe.
    """

    name = "journal"

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        self.broken = False
        self.fail_first_start = False
        self._cond = threading.Condition()
        self.starts: list[StartSeen] = []
        self.ends: list[tuple[str, str]] = []

    def session_start(self, ctx: PluginContext) -> None:
        seen = StartSeen(
            ctx.session_id,
            ctx.resumed,
            ctx.stripped,
            int(ctx.state.get("turns_seen", 0)),
            ctx.state.get("handle"),
            threading.current_thread(),
        )
        with self._cond:
            self.starts.append(seen)
            self._cond.notify_all()
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
        with self._cond:
            self.ends.append((ctx.session_id, reason))
            self._cond.notify_all()

    def of(self, session_id: str) -> list[StartSeen]:
        """Every start of ``session_id`` so far, in order."""
        with self._cond:
            return self._of_locked(session_id)

    def wait_starts(self, session_id: str, count: int, timeout: float = WAIT) -> list[StartSeen]:
        """Wait until ``session_id`` started ``count`` times; return its starts."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self._of_locked(session_id)) >= count, timeout)
            starts = self._of_locked(session_id)
        assert ok, f"{session_id!r} started {len(starts)} times, wanted {count}"
        return starts

    def _of_locked(self, session_id: str) -> list[StartSeen]:
        return [s for s in self.starts if s.session_id == session_id]


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


def assert_threads_back(before: Collection[threading.Thread]) -> None:
    """Join every thread started since ``before`` (bounded) and assert none is left."""
    for thread in threading.enumerate():
        if thread not in before:
            thread.join(WAIT)
    left = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not left, f"threads still running: {left}"


def session_thread_gone(journal: Journal, session_id: str) -> bool:
    """Whether every thread that ever ran ``session_id`` has exited (joins each, bounded)."""
    for seen in journal.of(session_id):
        seen.thread.join(WAIT)
    return not any(s.thread.is_alive() for s in journal.of(session_id))


def registry_lookup_fails(host: AgentHost, session_id: str) -> bool:
    """Whether the registry refuses ``session_id`` (no entry handed out)."""
    try:
        host.registry.get(session_id)
    except SessionNotFound:
        return True
    return False
