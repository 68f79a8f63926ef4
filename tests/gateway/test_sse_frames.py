"""SSE frames cannot be forged by what a plugin puts in its own events."""

from __future__ import annotations

from actors import Event
from gateway.sse import frame_event


def test_a_line_break_in_an_event_type_stays_inside_its_field() -> None:
    event = Event(7, "note\ndata: {}\n\nevent: answer\r", {"text": "hi"}, 1.5)
    text = frame_event(event)
    assert text == (
        "id: 7\nevent: note\\ndata: {}\\n\\nevent: answer\\r\n"
        'data: {"text":"hi","seq":7,"at":1.5}\n\n'
    )
    assert text.count("\n\n") == 1  # one frame
    assert [line.split(":")[0] for line in text.splitlines() if line] == ["id", "event", "data"]


def test_the_event_data_cannot_override_the_frames_seq_or_time() -> None:
    text = frame_event(Event(3, "progress", {"seq": 99, "at": 0, "done": 1}, 2.0))
    assert text == 'id: 3\nevent: progress\ndata: {"seq":3,"at":2.0,"done":1}\n\n'
