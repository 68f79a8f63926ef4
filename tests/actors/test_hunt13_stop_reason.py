"""``ModelResponse.stop_reason`` of the wrong type is refused, found by a bug hunt.

It was taken as it came and published with the ``model_response`` event: an enum member
of a provider SDK, or a live object, reached every event follower (a worker's frames to
its host, a gateway's JSON stream). Now a ``str`` subclass (a ``StrEnum`` member) is
published as a plain ``str``, and anything else but ``None`` fails the turn with a
``TypeError`` naming ``stop_reason``, as a response of the wrong types does.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import pytest

from actors import AgentSession, AgentTemplate, Message, ModelResponse, Tool, Usage

WAIT = 5.0


class Stop(enum.StrEnum):
    END = "end_turn"


class Stops:
    """Answers with ``stop_reason`` set to ``reason`` once, then to ``"stop"``."""

    model_string = "stops"

    def __init__(self, reason: Any) -> None:
        self.reason = reason
        self.calls = 0

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.calls += 1
        reason = self.reason if self.calls == 1 else "stop"
        return ModelResponse(Message.assistant(f"a{self.calls}"), Usage(), stop_reason=reason)


def _stop_reasons(proxy: Any) -> list[Any]:
    batch = proxy.events().get(timeout=WAIT)
    return [e.data.get("stop_reason") for e in batch.events if e.type == "model_response"]


@pytest.mark.parametrize("bad", [object(), 3, b"stop", ["stop"]], ids=repr)
def test_a_stop_reason_that_is_not_a_str_fails_its_turn(bad: Any) -> None:
    ref = AgentSession.start(AgentTemplate(model=Stops(bad)))
    proxy = ref.proxy()
    try:
        with pytest.raises(TypeError, match=r"stop_reason must be a str or None"):
            proxy.send("one").get(timeout=WAIT)
        assert proxy.history().get(timeout=WAIT) == []  # rolled back
        assert proxy.send("two").get(timeout=WAIT).content == "a2"
        assert _stop_reasons(proxy) == ["stop"]  # the bad one was never published
    finally:
        ref.stop()


def test_a_str_enum_stop_reason_is_published_as_a_plain_str() -> None:
    ref = AgentSession.start(AgentTemplate(model=Stops(Stop.END)))
    proxy = ref.proxy()
    try:
        proxy.send("one").get(timeout=WAIT)
        (reason,) = _stop_reasons(proxy)
        assert reason == "end_turn"
        assert type(reason) is str
    finally:
        ref.stop()
