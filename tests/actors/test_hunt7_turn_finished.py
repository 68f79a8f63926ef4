"""A turn whose checkpoint fails publishes no ``turn_finished``, found by a bug hunt.

``send`` published ``turn_finished`` before the turn's checkpoint was saved: when the save
failed, the turn was rolled back and the caller got the error, yet every follower of the
events had been told the turn finished (metrics counted it as done *and* failed, a
streamed send could end on it). Now ``turn_finished`` comes once the checkpoint is saved,
and the event mark that checkpoint records still covers it: a stream resumed from the
checkpoint numbers its events after it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pykka
import pytest

from actors import AgentSession, AgentTemplate, EchoModel, EventBuffer, Snapshot

WAIT = 5.0


class StoreFull(OSError):
    """What the failing checkpointer raises."""


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[AgentSession]]]:
    started: list[pykka.ActorRef[AgentSession]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


def test_a_turn_whose_checkpoint_fails_is_not_finished(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    full = [False]

    def save(snapshot: Snapshot) -> None:
        if full[0]:
            raise StoreFull("no space left")

    ref = AgentSession.start(AgentTemplate(model=EchoModel()), checkpointer=save)
    refs.append(ref)
    session = ref.proxy()
    session.send("one").get(timeout=WAIT)
    cursor = session.events().get(timeout=WAIT).cursor
    full[0] = True

    with pytest.raises(StoreFull, match="no space left"):
        session.send("two").get(timeout=WAIT)

    events = session.events(cursor).get(timeout=WAIT).events
    assert [e.type for e in events] == ["turn_started", "model_response", "error"]
    assert events[-1].data["turn"] == 2
    assert [m.content for m in session.history().get(timeout=WAIT)] == ["one", "echo: one"]


def test_the_saved_event_mark_covers_the_turn_finished_published_after_it(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    events = EventBuffer(100)
    marks: list[int] = []

    def save(snapshot: Snapshot) -> None:
        marks.append(events.mark)  # what a host's save records with the checkpoint

    ref = AgentSession.start(
        AgentTemplate(model=EchoModel()), event_buffer=events, checkpointer=save
    )
    refs.append(ref)
    ref.proxy().send("one").get(timeout=WAIT)

    finished = [e for e in events.since().events if e.type == "turn_finished"]
    assert [e.seq for e in finished] == marks == [events.last_seq]
    assert events.mark == events.last_seq  # the reservation ended with the turn
    resumed = EventBuffer(100, after=marks[0])  # the stream's next life
    assert resumed.publish("resumed").seq == finished[0].seq + 1


def test_a_reservation_counts_in_the_mark_until_it_is_released() -> None:
    events = EventBuffer(10)
    events.publish("a")
    events.reserve()
    assert (events.last_seq, events.mark) == (1, 2)
    events.publish("b")  # the reserved event
    events.unreserve()
    assert (events.last_seq, events.mark) == (2, 2)
    events.reserve()
    events.unreserve()  # not published after all: no seq is skipped
    assert events.publish("c").seq == 3
    with pytest.raises(RuntimeError, match="unreserve"):
        events.unreserve()
