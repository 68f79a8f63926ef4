"""A streamed send whose turn never finishes (its session died during it) shows the
``crashed`` event as its turn's last, never the events of the turn after it (another
send's, run by the session restarted): ``OwnTurn`` claimed every event after its own
``turn_started`` until a ``turn_finished`` or ``error``, whichever turn it was of."""

from __future__ import annotations

from typing import Any

from actors import Event
from gateway._turns import OwnTurn


def _events(*kinds: tuple[str, dict[str, Any]]) -> list[Event]:
    return [Event(seq, kind, data, float(seq)) for seq, (kind, data) in enumerate(kinds, 1)]


def test_a_crashed_turn_ends_at_its_crash() -> None:
    own = OwnTurn()
    events = _events(
        ("turn_started", {"turn": 1, "text": "a", "tag": own.tag}),
        ("delta", {"kind": "text", "text": "ec"}),
        ("crashed", {"reason": "SystemExit()", "kind": "exception"}),
        ("resumed", {"checkpoint_id": "c"}),
        ("turn_started", {"turn": 1, "text": "b", "tag": "other"}),
        ("turn_finished", {"turn": 1}),
    )
    assert [e.type for e in events if own.owns(e)] == ["turn_started", "delta", "crashed"]
    assert own.finished


def test_another_turn_started_ends_one_that_ended_unseen() -> None:
    own = OwnTurn()
    events = _events(
        ("turn_started", {"turn": 1, "text": "a", "tag": own.tag}),
        ("turn_started", {"turn": 2, "text": "b", "tag": "other"}),
        ("delta", {"kind": "text", "text": "b"}),
        ("turn_finished", {"turn": 2}),
    )
    assert [e.seq for e in events if own.owns(e)] == [1]


def test_a_turn_that_finishes_is_all_its_own() -> None:
    own = OwnTurn()
    events = _events(
        ("turn_started", {"turn": 1, "text": "x", "tag": "before"}),
        ("turn_finished", {"turn": 1}),
        ("turn_started", {"turn": 2, "text": "a", "tag": own.tag}),
        ("tool_call", {"name": "t"}),
        ("turn_finished", {"turn": 2}),
        ("turn_started", {"turn": 3, "text": "c", "tag": "after"}),
    )
    assert [e.seq for e in events if own.owns(e)] == [3, 4, 5]
