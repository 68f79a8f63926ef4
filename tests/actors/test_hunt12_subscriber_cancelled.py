"""An event subscriber that raises a ``BaseException`` such as ``asyncio.CancelledError`` is
skipped as one that raises an ``Exception`` is, found by a bug hunt.

``EventBuffer.publish`` promises that a subscriber that raises "is logged and skipped; it
never fails the session", but it caught ``Exception`` only: a subscriber whose asyncio work
was cancelled (``asyncio.run`` of a cancelled task raises ``CancelledError``) ended the
whole session in the middle of a turn (``ActorDeadError``), as a ``SystemExit`` does. Now
only what ``actors._loop.ends_session`` names (``SystemExit``, ``KeyboardInterrupt``, a
group holding one) keeps its meaning; anything else is logged and skipped.
"""

from __future__ import annotations

import asyncio

import pytest

from actors import AgentSession, AgentTemplate, Event, EventBuffer, ScriptedModel

WAIT = 5.0


class LibraryStop(BaseException):
    """A library's own ``BaseException`` (as ``gevent`` and ``trio`` have)."""


@pytest.mark.parametrize("error", [asyncio.CancelledError, LibraryStop], ids=lambda e: e.__name__)
def test_a_subscriber_raising_a_base_exception_leaves_the_session_running(
    error: type[BaseException],
) -> None:
    ref = AgentSession.start(AgentTemplate(model=ScriptedModel(["a", "b"])))
    proxy = ref.proxy()
    seen: list[str] = []

    def failing(event: Event) -> None:
        seen.append(event.type)
        raise error()

    try:
        proxy.subscribe(failing).get(timeout=WAIT)
        assert proxy.send("one").get(timeout=WAIT).content == "a"
        assert proxy.send("two").get(timeout=WAIT).content == "b"
        assert ref.is_alive()
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert seen.count("turn_finished") == 2


def test_later_subscribers_still_get_the_event() -> None:
    buffer = EventBuffer()
    got: list[int] = []

    def cancelled(_: Event) -> None:
        raise asyncio.CancelledError

    buffer.subscribe(cancelled)
    buffer.subscribe(lambda event: got.append(event.seq))

    buffer.publish("x")

    assert got == [1]


@pytest.mark.parametrize("error", [SystemExit, KeyboardInterrupt], ids=lambda e: e.__name__)
def test_what_ends_a_session_keeps_its_meaning(error: type[BaseException]) -> None:
    buffer = EventBuffer()

    def ending(_: Event) -> None:
        raise error

    buffer.subscribe(ending)
    with pytest.raises(error):
        buffer.publish("x")
