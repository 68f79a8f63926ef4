"""Session metadata no checkpoint can hold is refused where the session is made.

``AgentSession(metadata={"a": {1, 2}})`` started, and then every snapshot of it failed to
serialize: with a ``checkpointer`` every turn failed and was rolled back, far from the
cause. Now the constructor raises ``TypeError`` naming the path. (Live values are refused
too: ``test_hunt14_metadata_live.py``.)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from actors import AgentSession, AgentTemplate, Snapshot, SnapshotDecodeError


def _template() -> AgentTemplate:
    return AgentTemplate(model="echo")


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        ({"a": {1, 2}}, r"metadata\.a"),
        ({"a": [1, {"b": object()}]}, r"metadata\.a\[1\]\.b"),
        ({"n": 2**70}, r"metadata\.n"),
        ({"t": "bad \udcff"}, r"metadata\.t"),
        ({"when": datetime(2026, 1, 1)}, r"metadata\.when"),  # naive
        ({"a": {1: "x"}}, r"metadata\.a\[1\]"),
    ],
    ids=["set", "object", "int", "surrogate", "naive-datetime", "int-key"],
)
def test_unstorable_metadata_is_refused_at_construction(metadata: Any, path: str) -> None:
    with pytest.raises(TypeError, match=path):
        AgentSession(_template(), metadata=metadata)


def test_metadata_with_a_cycle_is_refused_at_construction() -> None:
    inner: list[Any] = []
    inner.append(inner)
    with pytest.raises((TypeError, ValueError), match=r"metadata\.loop"):
        AgentSession(_template(), metadata={"loop": inner})


def test_storable_metadata_is_kept_and_serializes() -> None:
    metadata = {"tenant_id": "t", "tags": ["a", 1, 2.5, None, True], "nested": {"k": b"x"}}
    session = AgentSession(_template(), metadata=metadata)
    snapshot = session.snapshot()
    again = Snapshot.deserialize(snapshot.serialize())
    assert again.state["metadata"] == metadata
    assert again.stripped_fields == ()


def test_unstorable_metadata_in_a_hand_made_restored_state_is_refused() -> None:
    with pytest.raises(SnapshotDecodeError, match=r"metadata\.a"):
        AgentSession(_template(), restored_state={"metadata": {"a": {1, 2}}})
