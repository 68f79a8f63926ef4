"""A live value in a model's provider state, found by a bug hunt.

A model's ``provider_state`` is plain data the session hands back with the next request,
after a resume too. A live value in it (a lock, a client, a callable) was stripped from
every checkpoint without a word: the model kept getting the live object while the session
ran, and a ``{"__stripped__": ...}`` marker after a resume, failing far from the cause (a
model has no ``session_start`` to rebuild it in, as a plugin does). It now fails the turn
that brought it, rolled back, with ``SnapshotEncodeError`` naming the path, as a value no
checkpoint can encode does; a stripped marker restored from a checkpoint is plain data.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from actors import (
    STRIPPED_KEY,
    AgentSession,
    AgentTemplate,
    Message,
    ModelRequest,
    ModelResponse,
    Snapshot,
    SnapshotEncodeError,
    Usage,
)


class _LiveState:
    """Answers ``a<n>``; its second response leaves a lock in the provider state."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[Any] = []

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        self.seen.append(request.provider_state)
        state: dict[str, Any] = {"turn": self.calls}
        if self.calls == 2:
            state["pool"] = [{"client": threading.Lock()}]
        return ModelResponse(Message.assistant(f"a{self.calls}"), Usage(), provider_state=state)


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointed", "no-checkpoint"])
def test_a_live_value_in_the_provider_state_fails_its_turn(checkpointed: bool) -> None:
    saved: list[Snapshot] = []
    model = _LiveState()
    ref = AgentSession.start(
        AgentTemplate(model=model), checkpointer=saved.append if checkpointed else None
    )
    try:
        proxy = ref.proxy()
        assert proxy.send("one").get(timeout=10).content == "a1"
        with pytest.raises(SnapshotEncodeError) as info:
            proxy.send("two").get(timeout=10)
        assert info.value.path == "state.provider_state.pool[0].client"
        assert "plain data" in str(info.value)
        state = proxy.state().get(timeout=10)
        assert state["provider_state"] == {"turn": 1}  # rolled back with its turn
        assert [m.content for m in proxy.history().get(timeout=10)] == ["one", "a1"]
        assert proxy.send("three").get(timeout=10).content == "a3"
        assert model.seen[-1] == {"turn": 1}
    finally:
        ref.stop()
    assert len(saved) == (2 if checkpointed else 0)


def test_a_stripped_marker_restored_in_the_provider_state_is_plain_data() -> None:
    # A checkpoint whose secret the host's redaction stripped holds a marker there.
    marker = {STRIPPED_KEY: "secret"}
    restored: dict[str, Any] = {"messages": [], "provider_state": {"auth": marker}}
    model = _LiveState()
    model.calls = 5  # no lock from it
    ref = AgentSession.start(AgentTemplate(model=model), restored_state=restored)
    try:
        snapshot = ref.proxy().snapshot().get(timeout=10)
    finally:
        ref.stop()
    assert snapshot.provider_state == {"auth": marker}
