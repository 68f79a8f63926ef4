"""A live value in a session's metadata is refused where it enters, found by a bug hunt.

``AgentSession(metadata={"client": conn})`` was taken, and every checkpoint stripped the
value to a marker without a word: nothing rebuilds metadata on resume (plugins have
``session_start`` for their state, metadata has nothing), so after a resume the user found
``{"__stripped__": "socket.socket"}`` where their object had been. Now the constructor
raises ``SnapshotEncodeError`` (a ``TypeError``) naming the path, as it does for a set or
an integer beyond 64 bits, and as a model's provider state refuses live values. The
session keeps its own copy of the metadata's containers, so what the caller changes in
them afterwards (a live value put in a list) does not reach its checkpoints either.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    SnapshotDecodeError,
    SnapshotEncodeError,
)


def _template() -> AgentTemplate:
    return AgentTemplate(model="echo")


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    made = socket.socket()
    yield made
    made.close()


def _live_cases(sock: socket.socket) -> list[tuple[dict[str, Any], str]]:
    return [
        ({"guard": threading.Lock()}, "metadata.guard"),
        ({"a": [1, {"conn": sock}]}, r"metadata.a[1].conn"),
        ({"hook": print}, "metadata.hook"),
        ({"t": (1, threading.Event())}, "metadata.t[1]"),
    ]


def test_a_live_value_is_refused_at_construction_naming_its_path(sock: socket.socket) -> None:
    for metadata, path in _live_cases(sock):
        with pytest.raises(SnapshotEncodeError) as caught:
            AgentSession(_template(), metadata=metadata)
        assert caught.value.path == path
        assert "live" in str(caught.value)
        assert "plain data" in str(caught.value)


def test_a_live_value_in_a_hand_made_restored_state_is_refused() -> None:
    with pytest.raises(SnapshotDecodeError, match=r"metadata\.guard"):
        AgentSession(_template(), restored_state={"metadata": {"guard": threading.Lock()}})


def test_plain_metadata_round_trips_whole() -> None:
    metadata = {"tenant_id": "t", "tags": ["a", 1], "nested": {"k": b"x"}}
    session = AgentSession(_template(), metadata=metadata)

    snapshot = session.snapshot()

    assert snapshot.stripped_fields == ()
    assert snapshot.state["metadata"] == metadata


def test_what_the_caller_changes_later_does_not_reach_the_session() -> None:
    tags: list[Any] = ["a"]
    session = AgentSession(_template(), metadata={"tags": tags})

    tags.append(threading.Lock())

    snapshot = session.snapshot()
    assert snapshot.state["metadata"] == {"tags": ["a"]}
    assert snapshot.stripped_fields == ()
