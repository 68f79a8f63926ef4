"""The event buffer, checked against the obvious model: every event ever published.

The buffer keeps the newest ``size`` events (a ring once full); whatever its
layout, ``since`` must answer as if it filtered the full history.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors import Event, EventBatch, EventBuffer

cursors = st.none() | st.integers(min_value=-2, max_value=40)


def _expected(published: list[Event], size: int, cursor: int | None) -> EventBatch:
    retained = published[-size:]
    after = 0 if cursor is None else cursor
    last = published[-1].seq if published else 0
    oldest = retained[0].seq if retained else last + 1
    missed = 0 if cursor is None else max(0, oldest - after - 1)
    return EventBatch(tuple(e for e in retained if e.seq > after), max(last, after), missed)


@given(
    size=st.integers(min_value=1, max_value=7),
    steps=st.lists(st.integers(min_value=0, max_value=5), max_size=8),
    cursor=cursors,
)
def test_since_matches_the_full_history(size: int, steps: list[int], cursor: int | None) -> None:
    buffer = EventBuffer(size)
    published: list[Event] = []
    for burst in steps:  # read after every burst, so reads see the ring at every offset
        published += [buffer.publish("tick", n=len(published)) for _ in range(burst)]
        assert buffer.since(cursor) == _expected(published, size, cursor)
    assert buffer.dropped == max(0, len(published) - size)


def test_events_are_numbered_from_one_and_carry_their_data() -> None:
    buffer = EventBuffer(2)
    seen: list[Event] = []
    buffer.subscribe(seen.append)
    first = buffer.publish("a", x=1)
    second = buffer.publish("b")
    third = buffer.publish("c", y=[2])
    assert isinstance(first, Event)
    assert [(e.seq, e.type, e.data) for e in seen] == [
        (1, "a", {"x": 1}),
        (2, "b", {}),
        (3, "c", {"y": [2]}),
    ]
    assert seen == [first, second, third]
    assert first.at <= second.at <= third.at
    assert buffer.since().events == (second, third)


@pytest.mark.parametrize("size", [0, -1, True, 2.0])
def test_size_must_be_a_positive_integer(size: object) -> None:
    with pytest.raises(ValueError, match="event_buffer_size must be a positive integer"):
        EventBuffer(size)  # type: ignore[arg-type]
