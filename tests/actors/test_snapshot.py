"""Snapshot: construction, round trip, strict encoding, decoding errors, migrations, accessors."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

import msgpack
import pytest

from actors import (
    SCHEMA_VERSION,
    Message,
    MigrationRegistry,
    Snapshot,
    SnapshotDecodeError,
    SnapshotEncodeError,
    Usage,
    decode_plain,
    encode_plain,
    schema_version,
)
from tests.actors.snapshot_helpers import session_state


def _snap(**overrides: Any) -> Snapshot:
    return Snapshot.new(session_id="sess-1", state=session_state(), **overrides)


# --- construction ---------------------------------------------------------------------------


def test_new_fills_identity_fields() -> None:
    before = datetime.now(UTC)
    snap = Snapshot.new(session_id="sess-1", state={"messages": []}, label="first")
    assert snap.schema_version == SCHEMA_VERSION == 2
    assert snap.session_id == "sess-1"
    assert snap.label == "first"
    assert snap.metadata == {}
    assert snap.stripped_fields == ()
    assert len(snap.checkpoint_id) == 32
    assert int(snap.checkpoint_id, 16) >= 0
    assert snap.saved_at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= snap.saved_at <= datetime.now(UTC)


def test_schema_version_names() -> None:
    assert Snapshot.current_schema_version() == schema_version() == Snapshot.SCHEMA_VERSION
    assert _snap().schema_version == schema_version()


def test_checkpoint_ids_are_unique_and_time_ordered() -> None:
    snaps = [Snapshot.new(session_id="s", state={}) for _ in range(500)]
    ids = [s.checkpoint_id for s in snaps]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert [s.saved_at for s in snaps] == sorted(s.saved_at for s in snaps)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"session_id": "", "state": {}}, ValueError, "session_id"),
        ({"session_id": 7, "state": {}}, TypeError, "session_id"),
        ({"session_id": "s", "state": None}, TypeError, "state must be a mapping"),
        ({"session_id": "s", "state": ["a"]}, TypeError, "state must be a mapping"),
        ({"session_id": "s", "state": {}, "label": 3}, TypeError, "label"),
        ({"session_id": "s", "state": {}, "metadata": [1]}, TypeError, "metadata"),
    ],
    ids=["empty-id", "int-id", "none-state", "list-state", "int-label", "list-metadata"],
)
def test_new_rejects_bad_arguments(kwargs: dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        Snapshot.new(**kwargs)


def test_new_requires_session_id_and_state() -> None:
    with pytest.raises(TypeError, match="session_id"):
        Snapshot.new(state={})  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="state"):
        Snapshot.new(session_id="s")  # type: ignore[call-arg]


def test_new_copies_state_and_normalizes_tuples() -> None:
    state: dict[str, Any] = {"pair": (1, 2), "nested": {"xs": [1, (2, 3)]}}
    snap = Snapshot.new(session_id="s", state=state)
    state["nested"]["xs"].append(4)
    assert snap.state == {"pair": [1, 2], "nested": {"xs": [1, [2, 3]]}}


def test_reference_cycle_in_state_is_a_clear_error() -> None:
    state: dict[str, Any] = {"plugins": {}}
    state["plugins"]["self"] = state
    with pytest.raises(ValueError, match=r"cycle at plugins\.self"):
        Snapshot.new(session_id="s", state=state)


def test_repr_is_short() -> None:
    text = repr(Snapshot.new(session_id="s", state=session_state(50)))
    assert "messages=201" in text
    assert len(text) < 300


# --- round trip -----------------------------------------------------------------------------


def test_round_trip_is_equal() -> None:
    state = session_state(4)
    state["blob"] = b"\x00\xff"
    state["when"] = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    state["ratio"] = 0.25
    snap = Snapshot.new(session_id="s", state=state, label="L", metadata={"k": [1, None, True]})
    back = Snapshot.deserialize(snap.serialize())
    assert back == snap
    assert hash(back) == hash(snap)
    assert back.state["when"] == state["when"]
    assert back.saved_at.utcoffset() == timedelta(0)
    assert back.serialize() == snap.serialize()


def test_round_trip_keeps_stripped_fields() -> None:
    snap = Snapshot.new(session_id="s", state={"plugins": {"db": {"lock": threading.Lock()}}})
    back = Snapshot.deserialize(snap.serialize())
    assert back.stripped_fields == ("plugins.db.lock",)
    assert back == snap


def test_to_json_is_readable() -> None:
    state = session_state(1)
    state["blob"] = b"hi"
    snap = Snapshot.new(session_id="s", state=state)
    doc = json.loads(snap.to_json(indent=2))
    assert doc["session_id"] == "s"
    assert doc["saved_at"] == snap.saved_at.isoformat()
    assert doc["state"]["blob"] == {"__bytes__": "aGk="}
    assert doc["state"]["messages"] == state["messages"]


def test_plain_codec_round_trip() -> None:
    value = {"a": [1, -(2**63), 2**64 - 1, 1.5, None, True, "x", b"y"], "b": {}}
    assert decode_plain(encode_plain(value)) == value


# --- strict encoding ------------------------------------------------------------------------


class Color(StrEnum):
    RED = "red"


def _naive() -> datetime:
    return datetime(2024, 1, 1)  # deliberately naive


@pytest.mark.parametrize(
    ("where", "value", "path", "words"),
    [
        ("metadata", {"callback": lambda: 1}, "metadata.callback", "function"),
        ("metadata", {"guard": threading.Lock()}, "metadata.guard", "lock"),
        ("state", {"plugins": {"x": {"obj": object()}}}, "state.plugins.x.obj", "object"),
        ("state", {"plugins": {1: "one"}}, "state.plugins[1]", "key 1 is not a str"),
        ("state", {"tags": {"a", "b"}}, "state.tags", "set"),
        ("state", {"color": Color.RED}, "state.color", "Color"),
        ("state", {"big": [0, 2**64]}, "state.big[1]", "64-bit"),
        ("state", {"when": _naive()}, "state.when", "naive datetime"),
    ],
    ids=["lambda", "lock", "object", "int-key", "set", "str-enum", "huge-int", "naive-datetime"],
)
def test_serialize_refuses_non_plain_values_naming_the_path(
    where: str, value: dict[str, Any], path: str, words: str
) -> None:
    base = _snap()
    snap = replace(base, metadata=value) if where == "metadata" else replace(base, state=value)
    with pytest.raises(SnapshotEncodeError, match=words) as info:
        snap.serialize()
    assert info.value.path == path
    assert path in str(info.value)
    with pytest.raises(SnapshotEncodeError):
        snap.to_json()


def test_serialize_refuses_a_live_value_put_in_after_new() -> None:
    snap = _snap()
    snap.state["plugins"]["memory"]["worker"] = threading.Thread(target=print)
    with pytest.raises(SnapshotEncodeError, match=r"state\.plugins\.memory\.worker"):
        snap.serialize()


def test_serialize_never_pickles() -> None:
    snap = replace(_snap(), metadata={"obj": Usage(1, 2)})
    with pytest.raises(SnapshotEncodeError, match=r"metadata\.obj"):
        snap.serialize()


def test_constructor_validates_fields() -> None:
    good = _snap()
    with pytest.raises(ValueError, match="timezone-aware"):
        replace(good, saved_at=_naive())
    with pytest.raises(TypeError, match="schema_version"):
        replace(good, schema_version="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="state keys"):
        replace(good, state={1: "x"})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"schema_version": True}, TypeError, "schema_version: not an int"),
        ({"schema_version": 0}, ValueError, "schema_version must be >= 1, got 0"),
        ({"checkpoint_id": 5}, TypeError, "checkpoint_id must be a str"),
        ({"session_id": ""}, ValueError, "session_id must not be empty"),
        ({"saved_at": "2024-01-01"}, TypeError, "saved_at must be a datetime"),
        ({"label": 3}, TypeError, "label: not a str"),
        ({"metadata": [("a", 1)]}, TypeError, "metadata must be a dict"),
        ({"metadata": {"a": 1, 2: "b"}}, TypeError, "metadata keys must be str"),
        ({"state": {"a": 1, None: 2}}, TypeError, "state keys must be str"),
        ({"stripped_fields": "a.b"}, TypeError, "stripped_fields must be a tuple"),
        ({"stripped_fields": ("a", 1)}, TypeError, "stripped_fields: not str"),
    ],
)
def test_constructor_names_each_bad_field(
    changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        replace(_snap(), **changes)


def test_with_metadata_is_replace_without_checking_the_rest_again() -> None:
    snap = _snap()
    stamped = snap.with_metadata({"event_seq": 7})
    assert stamped == replace(snap, metadata={"event_seq": 7})
    assert stamped.checkpoint_id == snap.checkpoint_id
    assert stamped.state is snap.state
    assert snap.metadata != {"event_seq": 7}  # the original is unchanged
    assert Snapshot.deserialize(stamped.serialize()) == stamped
    with pytest.raises(TypeError, match=r"^metadata must be a dict$"):
        snap.with_metadata([("event_seq", 7)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^metadata keys must be str$"):
        snap.with_metadata({1: 7})  # type: ignore[dict-item]


def test_constructor_keeps_str_subclass_keys_and_makes_stripped_fields_a_tuple() -> None:
    class Key(str):
        pass

    snap = replace(_snap(), metadata={Key("k"): 1}, stripped_fields=["plugins.a.b"])  # type: ignore[arg-type]
    assert snap.metadata == {"k": 1}
    assert snap.stripped_fields == ("plugins.a.b",)


# --- decoding errors ------------------------------------------------------------------------


def _plain(**changes: Any) -> dict[str, Any]:
    data = _snap().to_dict()
    data.update(changes)
    return {k: v for k, v in data.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("not bytes", "expected bytes"),
        (b"", "not valid msgpack"),
        (b"\xc1", "not valid msgpack"),
        (msgpack.packb([1, 2]), "expected a map"),
        (encode_plain(_plain()) + b"\x00", "trailing bytes"),
        (encode_plain(_plain())[:-3], "not valid msgpack"),
        (encode_plain(_plain(session_id=_DROP)), "missing: ['session_id']"),
        (encode_plain(_plain(extra=1)), "unknown: ['extra']"),
        (encode_plain(_plain(session_id=5)), "session_id must be a str"),
        (encode_plain(_plain(saved_at="2024-01-01")), "saved_at must be a datetime"),
        (encode_plain(_plain(stripped_fields="a.b")), "stripped_fields"),
        (encode_plain(_plain(schema_version=True)), "schema_version must be an integer"),
        (encode_plain(_plain(schema_version=0)), "schema_version must be an integer"),
        (msgpack.packb({"x": msgpack.ExtType(5, b"z")}), "unknown msgpack extension type 5"),
        (msgpack.packb({"state": {b"k": 1}}), "map key is not a string"),
        (msgpack.packb({1: 1}), "not valid msgpack"),
        (b"\xa3\xff\xfe\xfd", "UTF-8"),
    ],
    ids=[
        "str-input",
        "empty",
        "reserved-byte",
        "array-top",
        "trailing",
        "truncated",
        "missing-field",
        "unknown-field",
        "wrong-type",
        "string-datetime",
        "string-stripped-fields",
        "bool-version",
        "zero-version",
        "unknown-ext",
        "bytes-key",
        "int-key",
        "bad-utf8",
    ],
)
def test_deserialize_raises_one_clear_error(data: object, words: str) -> None:
    with pytest.raises(SnapshotDecodeError, match=words.replace("[", r"\[").replace("]", r"\]")):
        Snapshot.deserialize(data)


# every map-key type the fast C paths must still refuse, at depth, in lists and tuples
_BAD_KEYS = [(b"k", "b'k'"), (b"", "b''"), (7, "7"), (None, "None"), (1.5, "1.5"), (True, "True"),
             (("t",), "('t',)")]  # fmt: skip


@pytest.mark.parametrize(("key", "shown"), _BAD_KEYS, ids=[s for _, s in _BAD_KEYS])
def test_serialize_refuses_every_non_str_key_at_depth(key: object, shown: str) -> None:
    state = {"messages": [{"role": "user"}, {"role": "tool", "x": ({"ok": 1}, [{key: 1}])}]}
    snap = replace(_snap(), state=state)
    with pytest.raises(SnapshotEncodeError, match="is not a str") as info:
        snap.serialize()
    assert info.value.path == f"state.messages[1].x[1][0][{shown}]"


@pytest.mark.parametrize(
    "data",
    [
        msgpack.packb({"state": {b"": 1}}),  # bin 8
        b"\x81\xa5state\x81\xc5\x00\x00\x01",  # empty bin 16 as a key
        b"\x81\xa5state\x81\xc6\x00\x00\x00\x00\x01",  # empty bin 32 as a key
        msgpack.packb({"blob": b"xyz", "state": {b"k": 1}}),  # bytes value, then bytes key
        msgpack.packb({"blob": b"", "state": [{b"": 1}]}),
        msgpack.packb({"text": "\u0105\u0106" * 40, "state": {b"": 1}}),  # many 0xc4 0xc5 bytes
    ],
    ids=[
        "empty-bin8-key",
        "empty-bin16-key",
        "empty-bin32-key",
        "bin-then-key",
        "empty-both",
        "after-non-ascii",
    ],
)
def test_deserialize_refuses_bytes_keys_however_encoded(data: bytes) -> None:
    with pytest.raises(SnapshotDecodeError, match="map key is not a string"):
        Snapshot.deserialize(data)


def test_bytes_values_and_every_buffer_type_round_trip() -> None:
    state = {"blob": b"\x00\x01", "empty": b"", "nested": [{"b": b"\xc4\x00"}]}
    snap = replace(_snap(), state=state)
    data = snap.serialize()
    for form in (data, bytearray(data), memoryview(data)):
        again = Snapshot.deserialize(form)
        assert again == snap
        assert type(again.state["nested"][0]["b"]) is bytes


def test_newer_schema_is_refused_naming_both_versions() -> None:
    data = encode_plain(_plain(schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(SnapshotDecodeError) as info:
        Snapshot.deserialize(data)
    assert f"schema_version {SCHEMA_VERSION + 1} is newer" in info.value.reason
    assert f"supported version {SCHEMA_VERSION}" in info.value.reason


# --- migrations -----------------------------------------------------------------------------


def _legacy_v1_bytes() -> bytes:
    """A version-1 snapshot whose state still calls the history ``message_history``."""
    data = _plain()
    state = dict(data["state"])
    state["message_history"] = state.pop("messages")
    data["state"] = state
    data["schema_version"] = 1
    return encode_plain(data)


def test_migration_upgrades_older_versions_step_by_step() -> None:
    registry = MigrationRegistry(current_version=3)
    calls: list[int] = []

    @registry.register(1)
    def rename_history(data: dict[str, Any]) -> dict[str, Any]:
        calls.append(data["schema_version"])
        state = dict(data["state"])
        state["messages"] = state.pop("message_history")
        return {**data, "state": state}

    @registry.register(2)
    def add_label(data: dict[str, Any]) -> dict[str, Any]:
        calls.append(data["schema_version"])
        return {**data, "label": data["label"] or "migrated"}

    snap = Snapshot.deserialize(_legacy_v1_bytes(), migrations=registry)
    assert calls == [1, 2]
    assert snap.schema_version == 3
    assert snap.label == "migrated"
    assert snap.messages() == _snap().messages()
    # the shared registry was not touched: the same bytes are plain v1 there
    assert "message_history" in Snapshot.deserialize(_legacy_v1_bytes()).state


def test_migration_failures_are_decode_errors() -> None:
    registry = MigrationRegistry(current_version=3)
    registry.add(1, lambda data: data)
    with pytest.raises(SnapshotDecodeError, match="no migration registered from schema_version 2"):
        Snapshot.deserialize(_legacy_v1_bytes(), migrations=registry)

    broken = MigrationRegistry(current_version=2)
    broken.add(1, lambda data: data["nope"])
    with pytest.raises(SnapshotDecodeError, match="from schema_version 1 to 2 failed"):
        Snapshot.deserialize(_legacy_v1_bytes(), migrations=broken)

    wrong = MigrationRegistry(current_version=2)
    wrong.add(1, lambda data: [data])  # type: ignore[arg-type, return-value]
    with pytest.raises(SnapshotDecodeError, match="returned list"):
        Snapshot.deserialize(_legacy_v1_bytes(), migrations=wrong)


def test_migration_registry_validates_registration() -> None:
    registry = MigrationRegistry(current_version=2)
    registry.add(1, lambda data: data)
    with pytest.raises(ValueError, match="already registered"):
        registry.add(1, lambda data: data)
    with pytest.raises(ValueError, match="from_version"):
        registry.add(2, lambda data: data)
    with pytest.raises(ValueError, match="current_version"):
        MigrationRegistry(current_version=0)


# --- accessors ------------------------------------------------------------------------------


def test_accessors_read_the_session_shape() -> None:
    snap = Snapshot.deserialize(_snap().serialize())
    messages = snap.messages()
    assert all(isinstance(m, Message) for m in messages)
    assert messages[0] == Message.system("You are terse.")
    assert messages[2].tool_calls[0].name == "lookup"
    assert snap.usage() == Usage(input_tokens=33, output_tokens=18)
    assert snap.provider_state == {"cursor": 3}


def test_accessors_on_empty_state() -> None:
    snap = Snapshot.new(session_id="s", state={})
    assert snap.messages() == []
    assert snap.usage() == Usage()
    assert snap.provider_state is None


@pytest.mark.parametrize(
    ("state", "accessor", "words"),
    [
        ({"messages": {"role": "user"}}, "messages", "must be a list"),
        ({"messages": [{"role": "robot"}]}, "messages", r"state\.messages\[0\]"),
        ({"usage": {"input_tokens": -1}}, "usage", "state.usage"),
        ({"provider_state": [1]}, "provider_state", "provider_state must be a dict"),
    ],
    ids=["messages-not-list", "bad-role", "negative-usage", "provider-state-list"],
)
def test_accessors_report_malformed_state(state: dict[str, Any], accessor: str, words: str) -> None:
    snap = Snapshot.new(session_id="s", state=state)
    read: dict[str, Callable[[], object]] = {
        "messages": snap.messages,
        "usage": snap.usage,
        "provider_state": lambda: snap.provider_state,
    }
    with pytest.raises(SnapshotDecodeError, match=words):
        read[accessor]()
