"""The event buffer, checked against the obvious model: every event ever published.

The buffer keeps the newest ``size`` events (a ring once full); whatever its
layout, ``since`` must answer as if it filtered the full history. A buffer that
continues a stream ``after`` a persisted mark holds a history whose seqs
``1..after`` were all dropped (they belong to the stream's earlier life).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors import Event, EventBatch, EventBuffer

cursors = st.none() | st.integers(min_value=-2, max_value=40)


def _expected(published: list[Event], size: int, after: int, cursor: int | None) -> EventBatch:
    """The batch the full history implies: counted seq by seq, not by arithmetic."""
    retained = published[-size:]
    kept = {e.seq for e in retained}
    last = published[-1].seq if published else after
    if cursor is None:
        return EventBatch(tuple(retained), last, 0)
    if cursor > last:  # a cursor from an earlier life: the current life is all new
        lost = [seq for seq in range(after + 1, last + 1) if seq not in kept]
        return EventBatch(tuple(retained), last, len(lost))
    lost = [seq for seq in range(1, last + 1) if seq > cursor and seq not in kept]
    return EventBatch(tuple(e for e in retained if e.seq > cursor), last, len(lost))


@given(
    size=st.integers(min_value=1, max_value=7),
    after=st.integers(min_value=0, max_value=12),
    reseat=st.booleans(),
    steps=st.lists(st.integers(min_value=0, max_value=5), max_size=8),
    cursor=cursors,
    batched=st.booleans(),
)
def test_since_matches_the_full_history(  # noqa: PLR0917 (hypothesis draws each argument)
    size: int, after: int, reseat: bool, steps: list[int], cursor: int | None, batched: bool
) -> None:
    if reseat:  # created before the mark was known, then continued
        buffer = EventBuffer(size)
        buffer.continue_after(after)
    else:
        buffer = EventBuffer(size, after=after)
    published: list[Event] = []
    buffer.subscribe(published.append)
    for burst in steps:  # read after every burst, so reads see the ring at every offset
        if batched:  # a relay's burst: one publish_all
            base = len(published)
            buffer.publish_all(("tick", {"n": base + i}) for i in range(burst))
        else:
            for _ in range(burst):
                buffer.publish("tick", n=len(published))
        assert buffer.since(cursor) == _expected(published, size, after, cursor)
    assert [e.data["n"] for e in published] == list(range(len(published)))
    assert [e.seq for e in published] == list(range(after + 1, after + 1 + len(published)))
    assert buffer.dropped == max(0, len(published) - size)
    assert buffer.last_seq == after + len(published)


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


def test_publish_all_is_publish_one_event_after_the_other_without_copies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    buffer = EventBuffer(3)
    datas: list[dict[str, Any]] = [{"x": 1}, {}, {"y": [2]}, {"z": 3}]
    seen: list[tuple[Event, int]] = []

    def broken(event: Event) -> None:
        raise RuntimeError(f"subscriber failed on {event.type}")

    # Each event is appended and handed to every subscriber before the next is appended.
    buffer.subscribe(lambda event: seen.append((event, buffer.last_seq)))
    buffer.subscribe(broken)
    buffer.subscribe(lambda event: seen.append((event, len(buffer.since().events))))
    buffer.publish_all(zip("abcd", datas, strict=True))

    assert [(e.seq, e.type, e.data) for e, _ in seen[::2]] == [
        (1, "a", {"x": 1}),
        (2, "b", {}),
        (3, "c", {"y": [2]}),
        (4, "d", {"z": 3}),
    ]
    assert [mark for _, mark in seen] == [1, 1, 2, 2, 3, 3, 4, 3]
    assert all(e.data is data for (e, _), data in zip(seen[::2], datas, strict=True))
    assert [e.at for e, _ in seen] == sorted(e.at for e, _ in seen)
    assert buffer.since().events == tuple(e for e, _ in seen[2::2])
    assert buffer.dropped == 1
    failures = [r for r in caplog.records if "event subscriber" in r.getMessage()]
    assert len(failures) == 4  # logged and skipped, once per event


@pytest.mark.parametrize("size", [0, -1, True, 2.0])
def test_size_must_be_a_positive_integer(size: object) -> None:
    with pytest.raises(ValueError, match="event_buffer_size must be a positive integer"):
        EventBuffer(size)  # type: ignore[arg-type]


# -- a stream continued across a restart -------------------------------------------
#
# Each test plays a polling client (``batch = since(cursor); cursor = batch.cursor``)
# through the old life of a stream, a checkpoint that persists ``last_seq`` as the
# mark, and a new life ``EventBuffer(size, after=mark)``.


def _poll(buffer: EventBuffer, cursor: int | None) -> tuple[list[int], int, int]:
    batch = buffer.since(cursor)
    return [e.seq for e in batch.events], batch.cursor, batch.missed


def _old_life(published: int) -> EventBuffer:
    old = EventBuffer(10)
    for n in range(published):
        old.publish("tick", n=n)
    return old


def test_a_client_at_the_mark_continues_with_the_new_life() -> None:
    old = _old_life(5)
    assert _poll(old, None) == ([1, 2, 3, 4, 5], 5, 0)
    mark = old.last_seq  # checkpointed after the client's last read

    new = EventBuffer(10, after=mark)
    assert _poll(new, 5) == ([], 5, 0)  # nothing yet, and nothing lost
    new.publish("a")
    new.publish("b")
    new.publish("c")
    assert _poll(new, 5) == ([6, 7, 8], 8, 0)
    assert [e.type for e in new.since(5).events] == ["a", "b", "c"]
    assert _poll(new, 8) == ([], 8, 0)


def test_a_client_behind_the_mark_is_told_how_many_it_missed() -> None:
    old = _old_life(2)
    assert _poll(old, None) == ([1, 2], 2, 0)  # the client read up to 2 ...
    old.publish("tick")
    old.publish("tick")
    old.publish("tick")
    mark = old.last_seq  # ... and 3..5 were checkpointed but never read
    assert mark == 5

    new = EventBuffer(10, after=mark)
    assert _poll(new, 2) == ([], 5, 3)
    new.publish("tick")
    new.publish("tick")
    assert _poll(new, 2) == ([6, 7], 7, 3)
    assert _poll(new, 0) == ([6, 7], 7, 5)
    assert _poll(new, -1) == ([6, 7], 7, 5)  # there is no seq 0 or below to miss
    assert _poll(new, 7) == ([], 7, 0)  # the next poll: nothing more is reported missed
    assert new.dropped == 0  # the earlier life's events are not the new buffer's drops


def test_a_client_beyond_the_mark_catches_up_with_every_event_of_the_new_life() -> None:
    old = _old_life(4)
    mark = old.last_seq  # the last checkpoint ...
    old.publish("tick")
    old.publish("tick")
    old.publish("tick")
    assert _poll(old, None) == ([1, 2, 3, 4, 5, 6, 7], 7, 0)  # ... but the client read 5..7 too

    new = EventBuffer(10, after=mark)
    # Before the new life publishes, the cursor comes back down to the mark ...
    assert _poll(new, 7) == ([], 4, 0)
    seen: list[int] = []
    cursor = 4
    for _ in range(3):  # ... so the client's loop sees each new event once.
        new.publish("tick")
        events, cursor, missed = _poll(new, cursor)
        seen += events
        assert missed == 0
    assert seen == [5, 6, 7]

    # A client that polls only after the new life published gets all of it too.
    assert _poll(new, 9) == ([5, 6, 7], 7, 0)


def test_a_client_beyond_the_mark_is_told_of_the_new_lifes_dropped_events() -> None:
    new = EventBuffer(2, after=4)
    for _ in range(3):
        new.publish("tick")  # 5, 6, 7: 5 is dropped
    assert _poll(new, 9) == ([6, 7], 7, 1)
    assert _poll(new, 7) == ([], 7, 0)


def test_a_full_buffer_and_a_restart_add_up_their_missed_events() -> None:
    new = EventBuffer(3, after=10)
    for _ in range(5):
        new.publish("tick")  # 11..15: 11 and 12 are dropped
    assert new.dropped == 2
    assert new.last_seq == 15
    assert _poll(new, None) == ([13, 14, 15], 15, 0)
    assert _poll(new, 8) == ([13, 14, 15], 15, 2 + 2)  # 9, 10 before the mark; 11, 12 dropped
    assert _poll(new, 10) == ([13, 14, 15], 15, 2)
    assert _poll(new, 11) == ([13, 14, 15], 15, 1)
    assert _poll(new, 13) == ([14, 15], 15, 0)
    assert _poll(new, 20) == ([13, 14, 15], 15, 2)  # from an earlier life: only 11, 12
    new.publish("tick")
    assert _poll(new, 15) == ([16], 16, 0)


def test_subscribers_get_the_continued_numbering() -> None:
    buffer = EventBuffer(2, after=7)
    seen: list[Event] = []
    unsubscribe = buffer.subscribe(seen.append)
    first = buffer.publish("a", x=1)
    buffer.publish("b")
    buffer.publish("c")
    unsubscribe()
    buffer.publish("d")
    assert [(e.seq, e.type) for e in seen] == [(8, "a"), (9, "b"), (10, "c")]
    assert seen[0] is first


def test_last_seq_is_the_mark_until_the_first_event() -> None:
    assert EventBuffer().last_seq == 0
    buffer = EventBuffer(1)
    buffer.continue_after(3)
    buffer.continue_after(6)  # re-seated again before any event: the last call wins
    assert buffer.last_seq == 6
    assert _poll(buffer, 0) == ([], 6, 6)
    buffer.publish("a")
    buffer.publish("b")
    assert buffer.last_seq == 8  # counts the dropped event too


def test_a_stream_cannot_be_continued_once_it_published() -> None:
    buffer = EventBuffer(4, after=2)
    buffer.publish("a")
    message = (
        r"continue_after\(9\) called after seq 3 was published; "
        r".* or create EventBuffer\(size, after=9\) for the new life"
    )
    with pytest.raises(RuntimeError, match=message):
        buffer.continue_after(9)
    assert _poll(buffer, 2) == ([3], 3, 0)  # unchanged


@pytest.mark.parametrize("after", [-1, True, 2.0, "3"])
def test_after_must_be_a_non_negative_integer(after: object) -> None:
    message = "after must be a non-negative integer"
    with pytest.raises(ValueError, match=message):
        EventBuffer(4, after=after)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        EventBuffer(4).continue_after(after)  # type: ignore[arg-type]


def test_readers_never_see_a_gap_while_a_thread_publishes() -> None:
    buffer = EventBuffer(5, after=100)
    done = threading.Event()

    def publish() -> None:
        for n in range(2000):
            buffer.publish("tick", n=n)
        done.set()

    publisher = threading.Thread(target=publish)
    publisher.start()
    cursor, seen, missed = 100, 0, 0
    while True:
        finished = done.is_set()  # read before polling, so the last poll sees every event
        batch = buffer.since(cursor)
        assert [e.seq for e in batch.events] == list(
            range(batch.cursor - len(batch.events) + 1, batch.cursor + 1)
        )
        assert batch.cursor == cursor + batch.missed + len(batch.events)
        cursor, seen, missed = batch.cursor, seen + len(batch.events), missed + batch.missed
        if finished:
            break
    publisher.join()
    assert (cursor, seen + missed) == (2100, 2000)


def test_slow_subscribers_counts_those_not_promised_quick_until_they_unsubscribe() -> None:
    buffer = EventBuffer(10)
    quick = buffer.subscribe(lambda event: None, quick=True)
    assert buffer.slow_subscribers == 0  # a host may finish its turns on another thread
    slow = buffer.subscribe(lambda event: None)
    assert buffer.slow_subscribers == 1
    slow()
    slow()  # undone once only
    assert buffer.slow_subscribers == 0
    quick()
    assert buffer.slow_subscribers == 0
