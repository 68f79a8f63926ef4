"""A provider state that is not a dict fails its turn, found by a bug hunt.

``ModelResponse.provider_state`` is a dict or ``None``, and ``Snapshot.provider_state``
reads it back as one. A model that left a bare continuation id (``"resp_1"``) or a list
there was taken: the session kept it, saved it in every checkpoint and handed it to the
next request, and then ``Snapshot.provider_state`` raised ``SnapshotDecodeError`` on every
snapshot the session itself made. Now the response is refused as malformed (``TypeError``
naming the field), as a response of the wrong types is, and the turn is rolled back.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelRequest,
    ModelResponse,
    Plugin,
    PluginContext,
    Snapshot,
    Usage,
)

WAIT = 5.0


class LeavesState:
    """Answers ``a<n>``; its first response leaves ``first`` as its provider state, the
    later ones ``{"n": <n>}``. Records the provider state each request brought."""

    def __init__(self, first: Any) -> None:
        self.first = first
        self.calls = 0
        self.seen: list[Any] = []

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        self.seen.append(request.provider_state)
        state = self.first if self.calls == 1 else {"n": self.calls}
        return ModelResponse(Message.assistant(f"a{self.calls}"), Usage(), provider_state=state)


@pytest.mark.parametrize("bad", ["resp_1", ["resp_1"], 7, ("a", 1)], ids=repr)
def test_a_provider_state_that_is_not_a_dict_fails_its_turn(bad: Any) -> None:
    model = LeavesState(bad)
    ref = AgentSession.start(AgentTemplate(model=model))
    proxy = ref.proxy()
    try:
        with pytest.raises(TypeError, match=r"provider_state must be a dict or None"):
            proxy.send("one").get(timeout=WAIT)
        assert proxy.history().get(timeout=WAIT) == []  # rolled back

        assert proxy.send("two").get(timeout=WAIT).content == "a2"
        snapshot = proxy.snapshot().get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert model.seen == [None, None]  # the refused state never reached a request
    assert snapshot.provider_state == {"n": 2}
    assert Snapshot.deserialize(snapshot.serialize()).provider_state == {"n": 2}


class Replaces(Plugin):
    """An ``after_model`` that swaps in a response whose provider state is a str."""

    name = "replaces"

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse:
        return ModelResponse(response.message, response.usage, provider_state="bare-id")  # type: ignore[arg-type]


def test_an_after_model_replacement_is_held_to_the_same_rule() -> None:
    template = AgentTemplate(model=LeavesState({"n": 1}), plugins=[Replaces()])
    ref = AgentSession.start(template)
    proxy = ref.proxy()
    try:
        with pytest.raises(TypeError, match=r"provider_state must be a dict or None"):
            proxy.send("one").get(timeout=WAIT)
        snapshot = proxy.snapshot().get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert snapshot.provider_state is None


def test_a_dict_subclass_is_a_dict() -> None:
    model = LeavesState(OrderedDict(id="resp_1"))
    ref = AgentSession.start(AgentTemplate(model=model))
    proxy = ref.proxy()
    try:
        proxy.send("one").get(timeout=WAIT)
        snapshot = proxy.snapshot().get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert snapshot.provider_state == {"id": "resp_1"}
