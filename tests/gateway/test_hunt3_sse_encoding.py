"""Whatever a plugin puts in its events, SSE answers carry every frame as UTF-8 text with
strict JSON data: a lone surrogate (an undecodable file name) broke the answer off at its
event (a streamed send lost its ``answer``; an ``/events`` stream, resumed with
``Last-Event-ID``, broke at the same event every time), and a NaN was sent as ``NaN``,
which no browser's ``JSON.parse`` reads."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors import AgentTemplate, Event, Message, Plugin, PluginContext
from gateway.sse import frame, frame_event
from tests.gateway.conftest import one_session


class OddEvents(Plugin):
    """After each turn, events holding what JSON or UTF-8 cannot carry as they are."""

    name = "odd"

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.emit("listed", file="report\udcff.txt")
        ctx.emit("ratio", value=float("nan"), top=float("inf"))
        ctx.emit("listed\udcff", count=1)
        ctx.emit("done")


def _strict(text: str) -> Any:
    """``text`` parsed as JSON that refuses ``NaN`` and ``Infinity``."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def odd_server(tmp_path: Path) -> Iterator[httpx.Client]:
    """A served host whose template runs ``OddEvents``; a client of session ``s``."""
    with one_session(tmp_path, AgentTemplate(model="echo", plugins=[OddEvents()])) as client:
        yield client


def _strict_frames(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` frames of an SSE body, each data strict JSON."""
    kind = "message"
    for line in lines:
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield kind, _strict(line.removeprefix("data: "))
            kind = "message"


def _odd_frames(got: list[tuple[str, dict[str, Any]]]) -> None:
    found = dict(got)
    assert found["listed"]["file"] == "report\ufffd.txt"
    assert (found["ratio"]["value"], found["ratio"]["top"]) == (None, None)
    assert found["listed\ufffd"]["count"] == 1


def test_the_events_stream_goes_past_odd_events(odd_server: httpx.Client) -> None:
    answered = odd_server.post("/v1/sessions/s/messages", json={"text": "hi"})
    assert answered.status_code == 200, answered.text
    got = []
    with odd_server.stream("GET", "/v1/sessions/s/events", params={"since": "0"}) as r:
        assert r.status_code == 200
        for kind, data in _strict_frames(r.iter_lines()):
            got.append((kind, data))
            if kind == "done":
                break
    _odd_frames(got)
    assert got[-1][1]["plugin"] == "odd"


def test_a_streamed_send_gets_its_answer_past_odd_events(odd_server: httpx.Client) -> None:
    body = {"text": "hi", "stream": True}
    with odd_server.stream("POST", "/v1/sessions/s/messages", json=body) as r:
        assert r.status_code == 200
        text = r.read().decode("utf-8")  # the whole answer, and valid UTF-8
    got = list(_strict_frames(iter(text.splitlines())))
    assert got[-1] == ("answer", {"message": {"role": "assistant", "content": "echo: hi"}})
    _odd_frames(got)


def test_a_frame_is_utf8_and_strict_json_whatever_the_data() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    data: dict[Any, Any] = {(1, 2): "a\ud800b", "n": [float("-inf"), {"x": float("nan")}]}
    data["loop"] = looped  # a plugin's data is typed ``dict[str, Any]``, never checked
    text = frame_event(Event(5, "odd\udfff", data, 1.0))
    text.encode("utf-8")
    lines = text.splitlines()
    assert lines[:2] == ["id: 5", "event: odd\ufffd"]
    parsed = _strict(lines[2].removeprefix("data: "))
    assert parsed["(1, 2)"] == "a\ufffdb"
    assert parsed["n"] == [None, {"x": None}]
    assert (parsed["seq"], parsed["at"]) == (5, 1.0)


def test_plain_data_is_framed_as_before() -> None:
    assert frame("answer", {"text": "héllo", "n": 1.5}, 3) == (
        'id: 3\nevent: answer\ndata: {"text":"héllo","n":1.5}\n\n'
    )
