"""Provider state a checkpoint cannot hold fails the turn that brought it, found by a bug
hunt: also when no checkpoint is due on that turn (``checkpoint_every`` > 1, or manual
checkpoints). A model keeps its provider state until it returns another, so before, such a
state outlived its turn and every later checkpoint of the session failed, each rollback
restoring the same state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelRequest,
    ModelResponse,
    Snapshot,
    SnapshotEncodeError,
    Usage,
)

WAIT = 5.0


class OnceBadState:
    """Answers ``a<n>``; its first response leaves a provider state holding a naive
    datetime (no checkpoint can hold it), the later ones leave the state as it is."""

    def __init__(self) -> None:
        self.calls = 0

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        state: dict[str, Any] | None = None
        if self.calls == 1:
            state = {"cursor": 1, "at": datetime(2020, 1, 1)}  # naive: the point
        return ModelResponse(Message.assistant(f"a{self.calls}"), Usage(), provider_state=state)


@pytest.mark.parametrize("checkpoint_every", [2, None])
def test_unstorable_provider_state_fails_its_turn_even_with_no_checkpoint_due(
    checkpoint_every: int | None,
) -> None:
    saved: list[bytes] = []

    def save(snapshot: Snapshot) -> None:
        saved.append(snapshot.serialize())

    options: dict[str, Any] = (
        {} if checkpoint_every is None else {"checkpointer": save, "checkpoint_every": 2}
    )
    ref = AgentSession.start(AgentTemplate(model=OnceBadState()), **options)
    proxy = ref.proxy()
    try:
        with pytest.raises(SnapshotEncodeError, match=r"state\.provider_state\.at: naive"):
            proxy.send("one").get(timeout=WAIT)
        assert proxy.history().get(timeout=WAIT) == []  # the turn was rolled back

        assert proxy.send("two").get(timeout=WAIT).content == "a2"
        assert proxy.send("three").get(timeout=WAIT).content == "a3"
        snapshot = proxy.snapshot().get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert snapshot.state["provider_state"] is None
    assert Snapshot.deserialize(snapshot.serialize()).messages()[-1].content == "a3"
    if checkpoint_every is not None:
        assert len(saved) == 1  # the second turn's checkpoint, saved
