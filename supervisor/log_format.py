"""One JSON object per log line, with stable field names, for log collectors.

sessionvisor logs through ``logging`` (loggers ``supervisor.host``,
``supervisor.workers``, ``supervisor.store``, ...). Its lines about a session
or a worker carry their subjects as record attributes too (``extra=``), so a
collector can filter by them without parsing the message:

================ ====================================================
field            value
================ ====================================================
``time``         ISO 8601 UTC with milliseconds
``level``        ``DEBUG`` ... ``CRITICAL``
``logger``       the logger's name
``message``      the formatted message
``session_id``   the session the line is about (when it is about one)
``reason``       why a session ended (``killed``, an exception's type name, ...)
``worker_pid``   the worker process the line is about
``exception``    the traceback, when the line has one
``stack``        the call stack, when logged with ``stack_info=True``
================ ====================================================

Every line is valid JSON: a field value JSON has no literal for (an object, a
NaN or infinite float) is written as its ``str``. Every line is valid UTF-8:
text that cannot be (a lone surrogate, as in ``"\\ud800"``, say from a user's
message) is written as a JSON escape instead of making the handler fail and lose
the line.

Use: ``handler.setFormatter(JsonLogFormatter())`` (``logging.basicConfig``
takes a handler list). Thread-safe, as ``logging.Formatter`` is.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import UTC, datetime
from typing import Any

__all__ = ["FIELDS", "JsonLogFormatter"]

FIELDS = ("session_id", "reason", "worker_pid")
"""The record attributes copied into the JSON object when a line has them."""


class JsonLogFormatter(logging.Formatter):
    """Formats each record as one line of JSON (see the module docstring).

    Thread-safe: it keeps no state between records, as ``logging`` handlers on
    several threads share it.
    """

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, Any] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = _json_value(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        text = json.dumps(line, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 stream could write the line
            return json.dumps(line)  # escaped as \uXXXX, so the line stays valid JSON
        return text


def _json_value(value: object) -> str | int | float | bool:
    """``value`` itself if JSON has it, else its ``str``: a float that is NaN or infinite
    too, which ``json.dumps`` would write as the bare ``NaN``/``Infinity`` that no JSON
    parser of a log collector accepts (the whole line would be dropped)."""
    if isinstance(value, str | int | bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return str(value)
