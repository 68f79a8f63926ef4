"""Unsubscribing takes away the subscriber it was given for, found by a bug hunt: it
removed the first subscriber *equal* to it, so of two collectors that compared equal
(dataclasses holding the same events, both empty at first) unsubscribing the second
silenced the first and left the second subscribed; and calling one unsubscribe function
twice took away another subscription of the same callable. A cursor that is not an ``int``
failed deep inside ``since`` (``'>' not supported``), or was read as 1 (``True``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from actors import Event, EventBuffer


@dataclass
class Collector:
    """A subscriber that compares by value, as a dataclass does."""

    seen: list[str] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.seen.append(event.type)


def test_unsubscribing_one_of_two_equal_subscribers_leaves_the_other() -> None:
    buffer = EventBuffer(10)
    first, second = Collector(), Collector()
    buffer.subscribe(first)
    unsubscribe_second = buffer.subscribe(second)
    assert first == second

    unsubscribe_second()
    buffer.publish("after")

    assert first.seen == ["after"]
    assert second.seen == []


def test_an_unsubscribe_function_called_twice_undoes_only_its_own_subscription() -> None:
    buffer = EventBuffer(10)
    collector = Collector()
    unsubscribe = buffer.subscribe(collector)
    buffer.subscribe(collector)  # subscribed twice: each event reaches it twice

    unsubscribe()
    unsubscribe()
    buffer.publish("once")

    assert collector.seen == ["once"]


@pytest.mark.parametrize("cursor", ["3", 2.5, True, [1]], ids=["str", "float", "bool", "list"])
def test_a_cursor_that_is_not_an_int_is_refused_naming_what_since_takes(cursor: object) -> None:
    buffer = EventBuffer(10)
    buffer.publish("one")
    with pytest.raises(TypeError, match=r"since\(\) takes the cursor of an earlier EventBatch"):
        buffer.since(cast(Any, cursor))
    assert [e.type for e in buffer.since(0).events] == ["one"]
