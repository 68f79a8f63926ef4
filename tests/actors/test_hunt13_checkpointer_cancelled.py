"""A checkpointer raising ``asyncio.CancelledError`` fails the turn only, found by a bug hunt.

A checkpointer that raises an ``Exception`` fails its turn: the turn is rolled back, an
``error`` event is published and ``send`` raises it; the session lives on. One that
raised ``asyncio.CancelledError`` (an asyncio store's save cancelled by a timeout), a
``BaseException``, ended the session instead, the turn not rolled back. Now it fails the
turn in the same way, reaching the caller as ``CheckpointAborted`` (its ``error`` the
cancellation); a ``SystemExit`` keeps its meaning and ends the session.
"""

from __future__ import annotations

import asyncio

import pykka
import pytest

from actors import AgentSession, AgentTemplate, CheckpointAborted, Snapshot

WAIT = 5.0


class Saver:
    """A checkpointer that raises ``error`` once, then saves."""

    def __init__(self, error: BaseException) -> None:
        self.error: BaseException | None = error
        self.saved: list[Snapshot] = []

    def __call__(self, snapshot: Snapshot) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error
        self.saved.append(snapshot)


def test_a_cancelled_checkpointer_rolls_the_turn_back_and_the_session_goes_on() -> None:
    saver = Saver(asyncio.CancelledError())
    ref = AgentSession.start(AgentTemplate(model="echo"), checkpointer=saver)
    proxy = ref.proxy()
    try:
        with pytest.raises(CheckpointAborted) as caught:
            proxy.send("one").get(timeout=WAIT)
        assert isinstance(caught.value.error, asyncio.CancelledError)
        assert caught.value.__cause__ is caught.value.error
        assert proxy.history().get(timeout=WAIT) == []  # rolled back
        types = [e.type for e in proxy.events().get(timeout=WAIT).events]
        assert types[-1] == "error"
        assert "turn_finished" not in types

        proxy.send("two").get(timeout=WAIT)  # the session lives on
        assert [m.content for m in proxy.history().get(timeout=WAIT)] == ["two", "echo: two"]
        assert saver.saved[-1].state["turns"] == 1
    finally:
        ref.stop()


def test_a_checkpointer_exception_still_reaches_the_caller_as_it_is() -> None:
    ref = AgentSession.start(AgentTemplate(model="echo"), checkpointer=Saver(OSError("disk")))
    proxy = ref.proxy()
    try:
        with pytest.raises(OSError, match="disk"):
            proxy.send("one").get(timeout=WAIT)
        assert proxy.history().get(timeout=WAIT) == []
    finally:
        ref.stop()


def test_a_checkpointer_system_exit_still_ends_the_session() -> None:
    ref = AgentSession.start(AgentTemplate(model="echo"), checkpointer=Saver(SystemExit(3)))
    with pytest.raises(pykka.ActorDeadError):
        ref.proxy().send("one").get(timeout=WAIT)
    assert not ref.is_alive()
