"""A tool that raises ``asyncio.CancelledError`` fails as a tool, found by a bug hunt.

``CancelledError`` is a ``BaseException``, not an ``Exception``: a tool that ran asyncio
code inside (an MCP call whose task was cancelled, ``future.result()`` of a cancelled
future) raised it past the session's tool-error handling, and the session crashed. Now it,
like any other ``BaseException`` but ``SystemExit`` and ``KeyboardInterrupt`` (which keep
their meaning: see ``test_hunt5_system_exit``), becomes a tool error the model sees, and
the turn goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import cast

import pykka
import pytest

from actors import AgentSession, AgentTemplate, EchoModel, Message, Send, Tool, tool

WAIT = 5.0


class Interrupted(BaseException):
    """A ``BaseException`` of a library's own."""


@tool
def cancelled() -> str:
    """Raise ``asyncio.CancelledError``, as an asyncio call cancelled inside a tool does."""
    raise asyncio.CancelledError("the request was cancelled")


@tool
def interrupted() -> str:
    """Raise a ``BaseException`` that is not an ``Exception``."""
    raise Interrupted("stopped early")


@tool
def grouped() -> str:
    """Raise a group holding ``SystemExit``: that ends the session, as ``SystemExit`` does."""
    raise BaseExceptionGroup("tasks failed", [ValueError("bad"), SystemExit(3)])


@pytest.fixture
def start() -> Iterator[list[pykka.ActorRef[AgentSession]]]:
    refs: list[pykka.ActorRef[AgentSession]] = []
    yield refs
    for ref in refs:
        ref.stop(block=True, timeout=WAIT)


def _session(refs: list[pykka.ActorRef[AgentSession]], item: Tool) -> pykka.ActorRef[AgentSession]:
    ref = AgentSession.start(AgentTemplate(model=EchoModel(), tools=[item]))
    refs.append(ref)
    return ref


def _ask(ref: pykka.ActorRef[AgentSession], text: str) -> Message:
    return cast(Message, ref.ask(Send(text), timeout=WAIT))


@pytest.mark.parametrize(
    ("item", "error"),
    [
        (cancelled, "error: CancelledError: the request was cancelled"),
        (interrupted, "error: Interrupted: stopped early"),
    ],
    ids=["cancelled", "own-base-exception"],
)
def test_a_base_exception_of_a_tool_is_a_tool_error(
    start: list[pykka.ActorRef[AgentSession]], item: Tool, error: str
) -> None:
    ref = _session(start, item)

    answer = _ask(ref, f"/{item.name}")

    assert answer.content == f"{item.name} returned: {error}"
    (result,) = [
        e for e in ref.proxy().events().get(timeout=WAIT).events if e.type == "tool_result"
    ]
    assert (result.data["ok"], result.data["content"]) == (False, error)
    assert _ask(ref, "still here?").content == "echo: still here?"


def test_a_group_holding_system_exit_still_ends_the_session(
    start: list[pykka.ActorRef[AgentSession]],
) -> None:
    ref = _session(start, grouped)

    with pytest.raises(pykka.ActorDeadError) as died:
        ref.ask(Send("/grouped"), timeout=WAIT)

    assert isinstance(died.value.__cause__, BaseExceptionGroup)
    assert ref.actor_stopped.wait(WAIT)
