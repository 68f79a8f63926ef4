"""A send's ``tag`` labels its turn: the turn's ``turn_started`` event carries it, in
every form of send (blocking, future, awaited) and in thread and worker mode, so a
follower of the events can tell which send a turn serves. A bad tag is refused before
the turn, with what was wrong."""

from __future__ import annotations

import asyncio

import pytest

from supervisor import AsyncAgentHost
from tests.supervisor.host_helpers import HostFactory, template


def _started(host_events: list[tuple[str, dict[str, object]]]) -> list[dict[str, object]]:
    return [data for kind, data in host_events if kind == "turn_started"]


def test_each_form_of_send_labels_its_turn(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), "s")

    host.send(sid, "one", tag="req-1")
    host.futures.send(sid, "two", tag="req-2").result(30)
    asyncio.run(AsyncAgentHost(host).send(sid, "three", tag="req-3"))
    host.send(sid, "four")

    started = _started([(e.type, e.data) for e in host.events(sid).events])
    assert started == [
        {"turn": 1, "text": "one", "tag": "req-1"},
        {"turn": 2, "text": "two", "tag": "req-2"},
        {"turn": 3, "text": "three", "tag": "req-3"},
        {"turn": 4, "text": "four"},
    ]


@pytest.mark.parametrize(
    ("tag", "error", "message"),
    [
        (7, TypeError, "tag must be a str, got int"),
        ("", ValueError, "tag must be 1 to 256 characters, got 0"),
        ("x" * 257, ValueError, "tag must be 1 to 256 characters, got 257"),
        ("\udcff", ValueError, "tag holds a lone surrogate at index 0"),
    ],
)
def test_a_bad_tag_is_refused_before_the_turn(
    make_host: HostFactory, tag: object, error: type[Exception], message: str
) -> None:
    host = make_host()
    sid = host.start_session(template(), "s")

    with pytest.raises(error, match=message):
        host.send(sid, "hello", tag=tag)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        host.futures.send(sid, "hello", tag=tag)  # type: ignore[arg-type]

    assert [e.type for e in host.events(sid).events].count("turn_started") == 0
    assert host.send(sid, "fine", tag="ok").content == "echo: fine"
