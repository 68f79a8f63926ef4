"""``JsonLogFormatter``: one JSON object per line, with the subjects of the host's lines
as fields (issue 16, observability)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.log_format import JsonLogFormatter
from tests.supervisor.host_helpers import HostFactory, template, watch_events


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonLogFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def lines() -> Iterator[list[str]]:
    handler = _Lines()
    logger = logging.getLogger("supervisor")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def test_a_crash_line_names_its_session_and_reason(
    make_host: HostFactory, lines: list[str]
) -> None:
    host = make_host()
    sid = host.start_session(template())
    waiter = watch_events(host, sid)
    host.kill(sid, reason="test")
    waiter.wait_for("resumed")
    crashes = [json.loads(line) for line in lines if "crashed" in line]
    assert crashes, lines
    line = crashes[0]
    assert line["level"] == "WARNING"
    assert line["logger"] == "supervisor.host"
    assert line["session_id"] == sid
    assert line["reason"] == "killed"
    assert line["message"].startswith(f"session {sid!r} crashed")
    assert line["time"].endswith("Z")


def test_a_line_with_a_traceback_carries_it_and_odd_values_are_strings() -> None:
    logger = logging.getLogger("test.json")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logger.makeRecord(
            "test.json", logging.ERROR, __file__, 1, "failed: %s", ("x",), exc_info=sys.exc_info(),
            extra={"session_id": "s1", "worker_pid": 42, "reason": object()},
        )  # fmt: skip
    line = json.loads(JsonLogFormatter().format(record))
    assert line["message"] == "failed: x"
    assert line["session_id"] == "s1"
    assert line["worker_pid"] == 42
    assert line["reason"].startswith("<object object")
    assert "ValueError: boom" in line["exception"]
    assert "\n" not in JsonLogFormatter().format(record)


def test_a_line_logged_with_its_stack_carries_it() -> None:
    """``stack_info=True`` asks for the call stack: the line has it (``stack``), as the
    text format has it, instead of dropping it."""
    record = logging.getLogger("test.json").makeRecord(
        "test.json", logging.WARNING, __file__, 1, "odd state", (), None, sinfo="Stack (most "
        "recent call last):\n  File \"x.py\", line 3, in where_it_was",
    )  # fmt: skip
    text = JsonLogFormatter().format(record)
    assert "\n" not in text
    line = json.loads(text)
    assert line["message"] == "odd state"
    assert "in where_it_was" in line["stack"]


def test_a_line_with_a_lone_surrogate_is_still_written_as_utf8_json(tmp_path: Path) -> None:
    """A lone surrogate in a logged text (a user's message, say) cannot be UTF-8: a file
    handler would fail on the line ("--- Logging error ---") and lose it. It is written,
    escaped, and reads back as the same text."""
    path = tmp_path / "log.jsonl"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(JsonLogFormatter())
    logger = logging.getLogger("test.json.surrogate")
    logger.addHandler(handler)
    logger.propagate = False
    errors: list[str] = []
    handler.handleError = lambda record: errors.append(record.getMessage())  # type: ignore[method-assign]
    try:
        logger.warning("the user sent %s é", "bad \ud800 text", extra={"session_id": "s1"})
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert errors == []
    (text,) = path.read_text(encoding="utf-8").splitlines()
    line = json.loads(text)
    assert line["message"] == "the user sent bad \ud800 text é"
    assert line["session_id"] == "s1"
