"""A turn's steering is used for good once its checkpoint is saved, not only once its
``turn_finished`` is seen.

The host keeps each steering text the worker has taken until the turn that took it is
over (``_Steer``), and gives back what is kept when the session ends, for the next
incarnation. It used to drop a turn's texts only at ``turn_finished``, which the host
publishes after the turn's checkpoint is saved (``SessionLink.finish_send``): a session
ending in between (its stop answered on another thread while the turn's reply was being
delivered) gave the texts back although the saved checkpoint had used them, and the next
incarnation got them a second time.

Driven directly: a real ``EventBuffer``, ``SteeringQueue`` and ``SessionLink``, a stand-in
for the worker's client, and a release run by a subscriber that sees ``turn_finished``
before the forwarder does (the moment between the save and the forwarder's bookkeeping).
"""

from __future__ import annotations

from typing import Any

from actors import Event, EventBuffer, Message, Snapshot, SteeringQueue
from supervisor.workers._proxy import SessionLink, _Steer


class _AcceptingClient:
    """Takes the place of ``WorkerClient``: every ``steer`` call is accepted."""

    def __init__(self) -> None:
        self.steered: list[str] = []

    def call(
        self, op: str, payload: Any = None, timeout: float | None = None, *, kill_late: bool = True
    ) -> None:
        assert op == "steer"
        self.steered.append(payload["text"])


def test_a_release_right_after_a_turns_save_does_not_give_its_steering_back() -> None:
    events, queue, client = EventBuffer(), SteeringQueue(8), _AcceptingClient()
    steer = _Steer(client, "s", queue)  # type: ignore[arg-type]  # a stand-in client
    given_back: list[list[str]] = []

    def end_the_session(event: Event) -> None:  # subscribed first: sees it first
        if event.type == "turn_finished":
            steer.release()
            given_back.append(queue.drain())

    events.subscribe(end_the_session)
    steer.start(events)
    steer.start_written()
    queue.put("used by the turn")
    assert client.steered == ["used by the turn"]
    events.publish("turn_started", turn=1, text="hi")
    events.publish("steered", text="used by the turn")

    saved: list[Snapshot] = []
    link = SessionLink(client, "s", events, saved.append, None, steer=steer)  # type: ignore[arg-type]
    checkpoint = Snapshot.new(session_id="s", state={"messages": []})
    answer = link.finish_send(
        {
            "message": Message(role="assistant", content="done").to_dict(),
            "checkpoint": {"whole": checkpoint.serialize()},
            "turn_finished": {"turn": 1, "content": "done"},
        }
    )

    assert answer.content == "done"
    assert [s.checkpoint_id for s in saved] == [checkpoint.checkpoint_id]
    assert given_back == [[]]  # the saved turn used it: the next incarnation must not


def test_a_release_before_a_turns_save_gives_its_steering_back() -> None:
    """The other side: a turn whose checkpoint was not saved yet gives its texts back."""
    events, queue, client = EventBuffer(), SteeringQueue(8), _AcceptingClient()
    steer = _Steer(client, "s", queue)  # type: ignore[arg-type]  # a stand-in client
    steer.start(events)
    steer.start_written()
    queue.put("taken, not saved")
    events.publish("turn_started", turn=1, text="hi")
    events.publish("steered", text="taken, not saved")
    steer.release()
    assert queue.drain() == ["taken, not saved"]
