"""``JsonLogFormatter``: one JSON object per line, with the subjects of the host's lines
as fields (issue 16, observability)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

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
