"""``JsonLogFormatter``: every line stays strict JSON, whatever a field's value."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from supervisor.log_format import JsonLogFormatter


def _strict(line: str) -> dict[str, object]:
    """Parse ``line`` as RFC 8259 JSON: ``NaN`` and ``Infinity`` are not JSON."""

    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    parsed: dict[str, object] = json.loads(line, parse_constant=refuse)
    return parsed


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_field_json_has_no_number_for_is_written_as_text(value: float) -> None:
    logger = logging.getLogger("test.json")
    try:
        raise KeyError("clé 🙂")
    except KeyError:
        record = logger.makeRecord(
            "test.json", logging.ERROR, __file__, 1, "héllo %s", ("wörld 🙂",),
            exc_info=sys.exc_info(), extra={"session_id": "s1", "worker_pid": value},
        )  # fmt: skip
    line = _strict(JsonLogFormatter().format(record))
    assert line["worker_pid"] == str(value)
    assert line["message"] == "héllo wörld 🙂"
    assert line["session_id"] == "s1"
    assert "KeyError: 'clé 🙂'" in str(line["exception"])


def test_finite_numbers_stay_numbers() -> None:
    record = logging.getLogger("test.json").makeRecord(
        "test.json", logging.INFO, __file__, 1, "x", (), None, extra={"worker_pid": 1.5}
    )
    assert _strict(JsonLogFormatter().format(record))["worker_pid"] == 1.5
