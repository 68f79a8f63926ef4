"""Snapshot schema 2 (usage details): what the previous version saved still loads.

``fixtures/snapshot_v1.msgpack`` was written by the code before the bump (see
``fixtures/README.md``); it is read here through the shared migrations.
"""

from __future__ import annotations

from pathlib import Path

from actors import (
    SCHEMA_VERSION,
    SNAPSHOT_MIGRATIONS,
    AgentSession,
    AgentTemplate,
    Message,
    ModelResponse,
    ScriptedModel,
    Snapshot,
    Usage,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WAIT = 5.0


def _v1() -> bytes:
    return (FIXTURES / "snapshot_v1.msgpack").read_bytes()


def test_the_fixture_is_a_version_1_snapshot() -> None:
    assert SCHEMA_VERSION == 2
    assert b"schema_version\x01" in _v1()  # msgpack: the key, then the fixint 1


def test_a_version_1_snapshot_loads_with_zero_usage_details() -> None:
    snap = Snapshot.deserialize(_v1())
    assert snap.schema_version == SCHEMA_VERSION
    assert snap.session_id == "fixture-v1"
    assert snap.label == "v1-fixture"
    assert snap.usage() == Usage(83, 14, cached_input_tokens=0, reasoning_tokens=0)
    assert snap.state["usage"] == Usage(83, 14).to_dict()
    assert snap.provider_state == {"conversation": "conv-1", "step": 2}
    assert [m.role for m in snap.messages()] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert snap.messages()[1].tool_calls[0].arguments == {"a": 2, "b": 40}
    assert snap.state["metadata"] == {"tenant_id": "acme"}


def test_the_migration_copies_what_it_changes() -> None:
    plain = {"schema_version": 1, "state": {"usage": {"input_tokens": 1, "output_tokens": 2}}}
    upgraded = SNAPSHOT_MIGRATIONS.upgrade(plain, 1)
    assert upgraded["state"]["usage"] == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cached_input_tokens": 0,
        "reasoning_tokens": 0,
    }
    assert plain["state"] == {"usage": {"input_tokens": 1, "output_tokens": 2}}
    no_usage = {"schema_version": 1, "state": {"messages": []}}
    assert SNAPSHOT_MIGRATIONS.upgrade(no_usage, 1)["state"] == {"messages": []}


def test_a_session_resumed_from_version_1_goes_on_and_saves_version_2() -> None:
    old = Snapshot.deserialize(_v1())
    model = ScriptedModel([ModelResponse(Message.assistant("Again."), Usage(5, 1, 4, 1))])
    ref = AgentSession.start(
        AgentTemplate(model=model),
        restored_state=old.state,
        stripped_fields=old.stripped_fields,
    )
    try:
        session = ref.proxy()
        assert session.send("once more").get(timeout=WAIT).content == "Again."
        new = Snapshot.deserialize(session.snapshot().get(timeout=WAIT).serialize())
    finally:
        ref.stop()
    assert new.schema_version == 2
    assert new.usage() == Usage(88, 15, cached_input_tokens=4, reasoning_tokens=1)
    assert len(new.messages()) == 8
