"""Token counts past what a checkpoint stores (64-bit msgpack ints) are refused where a
``Usage`` is made, and a session's sums stop at the largest count: a session's usage is
never rolled back, so one count too large failed its turn's checkpoint and every later one."""

from __future__ import annotations

from typing import Any

import pytest

from actors import AgentSession, AgentTemplate, Message, ModelResponse, Snapshot, Usage
from actors.messages import MAX_TOKEN_COUNT

WAIT = 10


def test_a_count_past_64_bits_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"Usage.input_tokens .* at most 2\*\*63 - 1"):
        Usage(2**64)
    assert Usage(MAX_TOKEN_COUNT).input_tokens == MAX_TOKEN_COUNT


def test_sums_stop_at_the_largest_count() -> None:
    big = Usage(MAX_TOKEN_COUNT, 1, 2, 3)
    assert big + Usage(5, 1, 1, 1) == Usage(MAX_TOKEN_COUNT, 2, 3, 4)


def test_a_session_whose_usage_adds_up_past_64_bits_still_checkpoints() -> None:
    class Huge:
        model_string = "huge"

        def generate(self, messages: Any, tools: Any) -> ModelResponse:
            return ModelResponse(Message.assistant("ok"), Usage(MAX_TOKEN_COUNT, MAX_TOKEN_COUNT))

    ref = AgentSession.start(AgentTemplate(model=Huge()))
    try:
        session = ref.proxy()
        for text in ("one", "two", "three"):
            assert session.send(text).get(timeout=WAIT).content == "ok"
        snapshot = session.snapshot().get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    loaded = Snapshot.deserialize(snapshot.serialize())
    assert loaded.usage() == Usage(MAX_TOKEN_COUNT, MAX_TOKEN_COUNT)
