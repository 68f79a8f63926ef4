"""``AgentSession`` refuses constructor arguments that would fail it later, found by a bug
hunt.

A host passes checked values, but ``AgentSession`` is public and its arguments were taken
as they came: ``session_id=123`` (or a restored state whose ``session_id`` is not a str)
started a session every snapshot of which then failed (``session_id must be a str``), so
with a ``checkpointer`` every turn failed and was rolled back; so did a ``checkpointer``
that cannot be called; ``template=None`` failed with ``'NoneType' object has no attribute
'model_string'``. Each is now refused where the session is made, naming the argument;
a restored ``turns`` that is not a count (``1.7`` read as 1, ``"5"`` as 5) is a bad
checkpoint (``SnapshotDecodeError``), as a restored state of other wrong shapes is.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    ScriptedModel,
    Snapshot,
    SnapshotDecodeError,
)

WAIT = 5.0


def _template() -> AgentTemplate:
    return AgentTemplate(model=ScriptedModel(["a", "b"]))


@pytest.mark.parametrize("session_id", [123, b"s1", ["s"]], ids=repr)
def test_a_session_id_that_is_not_a_str_is_refused(session_id: Any) -> None:
    with pytest.raises(TypeError, match=r"session_id must be a str"):
        AgentSession.start(_template(), session_id=session_id)


def test_an_empty_session_id_is_refused_not_replaced() -> None:
    with pytest.raises(ValueError, match=r"session_id"):
        AgentSession.start(_template(), session_id="")


def test_a_restored_session_id_that_is_not_a_str_is_a_bad_checkpoint() -> None:
    with pytest.raises(SnapshotDecodeError, match=r"session_id"):
        AgentSession.start(_template(), restored_state={"session_id": 123})


def test_a_checkpointer_that_cannot_be_called_is_refused() -> None:
    with pytest.raises(TypeError, match=r"checkpointer must be callable"):
        AgentSession.start(_template(), checkpointer=5)


def test_metadata_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(TypeError, match=r"metadata must be a mapping"):
        AgentSession.start(_template(), metadata=[("a", 1)])


def test_a_template_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match=r"template must be an AgentTemplate"):
        AgentSession.start(None)


def test_good_arguments_still_make_a_session_that_checkpoints() -> None:
    saved: list[Snapshot] = []
    ref = AgentSession.start(
        _template(),
        session_id="s1",
        metadata={"tenant_id": "t", "n": [1, {"a": None}]},
        checkpointer=saved.append,
    )
    try:
        assert ref.proxy().send("hi").get(timeout=WAIT).content == "a"
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert saved[0].session_id == "s1"
    restored = Snapshot.deserialize(saved[0].serialize())
    assert restored.state["metadata"]["n"] == [1, {"a": None}]


@pytest.mark.parametrize("turns", [1.7, True, "5", -3, None, 2**70], ids=repr)
def test_a_restored_turn_count_that_is_not_a_count_is_a_bad_checkpoint(turns: Any) -> None:
    # ``int()`` took 1.7 as 1, True as 1 and "5" as 5; 2**70 started a session no
    # checkpoint of which could be saved (beyond 64 bits).
    with pytest.raises(SnapshotDecodeError, match=r"turns"):
        AgentSession.start(_template(), restored_state={"turns": turns})


def test_a_restored_turn_count_goes_on() -> None:
    ref = AgentSession.start(_template(), restored_state={"turns": 4})
    try:
        ref.proxy().send("hi").get(timeout=WAIT)
        assert ref.proxy().state().get(timeout=WAIT)["turns"] == 5
    finally:
        ref.stop(block=True, timeout=WAIT)
