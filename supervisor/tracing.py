"""OpenTelemetry spans of an ``AgentHost``'s turns, model calls, tool calls and checkpoints
(optional: needs ``opentelemetry-api``, ``pip install 'sessionvisor[tracing]'``; export
them with the SDK or any other implementation of the API).

``HostTracing(host)`` makes, for every turn that ends, a span
``sessionvisor.turn`` with a child ``sessionvisor.model_call`` per model call
and ``sessionvisor.tool_call`` per tool call, and a span
``sessionvisor.checkpoint`` per durable save. Each carries
``sessionvisor.session_id``, ``sessionvisor.tenant_id`` and
``sessionvisor.model``; a failed turn's span has status ERROR.

The spans are built from the sessions' events (never from a plugin's own,
which carry its ``plugin``, whatever their name) when a turn ends, not around
the calls themselves: so they come out alike in thread and worker mode (a
worker's events reach the host process; its spans would not), and a session's
thread does no tracing work. Each step's duration is exact (the events carry
their ``seconds``); where it sits in time is the event's time, which in worker
mode is when the host received it, so a child is clamped into its turn.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actors import Event
from supervisor._host_record import SessionRecord
from supervisor.checkpoint_store import CheckpointInfo

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from supervisor.host import AgentHost

__all__ = ["HostTracing"]

_PREFIX = "sessionvisor."


@dataclass(slots=True)
class _Step:
    name: str
    end: float  # wall-clock seconds
    seconds: float
    attributes: dict[str, Any]


@dataclass(slots=True)
class _Turn:
    started: float  # wall-clock seconds of ``turn_started``
    steps: list[_Step] = field(default_factory=list)


class HostTracing:
    """Emits one host's spans through an OpenTelemetry tracer. Thread-safe: sessions'
    events arrive on their own threads; one lock guards the turns in progress.

    Args:
        host: The host to trace, for its whole life.
        tracer_provider: Where spans go; the global provider by default.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed.
    """

    def __init__(self, host: AgentHost, tracer_provider: TracerProvider | None = None) -> None:
        try:
            from opentelemetry import trace  # noqa: PLC0415 (an optional extra)
        except ImportError as exc:  # pragma: no cover - the test environment has it
            raise ImportError(
                "HostTracing needs opentelemetry-api: pip install 'sessionvisor[tracing]'"
            ) from exc
        self._trace = trace
        self._tracer = trace.get_tracer("sessionvisor", tracer_provider=tracer_provider)
        self._host = host
        self._turns: dict[str, _Turn] = {}
        self._lock = threading.Lock()
        host._checkpoints.observe(self._saved)
        host._table.tap(self._event)

    def _event(self, record: SessionRecord, event: Event) -> None:
        kind, data, sid = event.type, event.data, record.session_id
        if "plugin" in data:
            return  # a plugin's own event, whatever its name: no step of a turn
        if kind == "turn_started":
            with self._lock:
                self._turns[sid] = _Turn(event.at)
        elif kind in ("model_response", "tool_result"):
            step = _step(event)
            with self._lock:
                turn = self._turns.get(sid)
                if turn is not None:
                    turn.steps.append(step)
        elif kind == "turn_finished" or (kind == "error" and "turn" in data):
            with self._lock:
                turn = self._turns.pop(sid, None)
            if turn is not None:
                self._emit_turn(record, event, turn)
        elif kind in ("crashed", "given_up", "moved"):  # a turn in progress died with it
            with self._lock:
                self._turns.pop(sid, None)

    def _emit_turn(self, record: SessionRecord, ended: Event, turn: _Turn) -> None:
        end = ended.at
        seconds = _seconds(ended.data.get("seconds"))
        start = turn.started if seconds is None else end - seconds
        turn_span = self._tracer.start_span(
            f"{_PREFIX}turn",
            start_time=_ns(start),
            attributes={**_identity(record), f"{_PREFIX}turn": ended.data.get("turn", 0)},
        )
        if ended.type == "error":
            status = self._trace.Status(self._trace.StatusCode.ERROR, str(ended.data["error"]))
            turn_span.set_status(status)
        context = self._trace.set_span_in_context(turn_span)
        for step in turn.steps:
            step_end = min(max(step.end, start), end)
            step_start = max(step_end - step.seconds, start)
            span = self._tracer.start_span(
                f"{_PREFIX}{step.name}",
                context=context,
                start_time=_ns(step_start),
                attributes={**_identity(record), **step.attributes},
            )
            span.end(end_time=_ns(step_end))
        turn_span.end(end_time=_ns(end))

    def _saved(self, info: CheckpointInfo, seconds: float) -> None:
        end = time.time()
        record = self._host._table.get(info.session_id)
        attributes: dict[str, Any] = {
            f"{_PREFIX}session_id": info.session_id,
            f"{_PREFIX}checkpoint_id": info.checkpoint_id,
            f"{_PREFIX}checkpoint_bytes": info.size,
        }
        if record is not None:
            attributes.update(_identity(record))
        span = self._tracer.start_span(
            f"{_PREFIX}checkpoint", start_time=_ns(end - seconds), attributes=attributes
        )
        span.end(end_time=_ns(end))


def _step(event: Event) -> _Step:
    data = event.data
    duration = _seconds(data.get("seconds")) or 0.0
    if event.type == "tool_result":
        attributes: dict[str, Any] = {
            f"{_PREFIX}tool": str(data.get("name")),
            f"{_PREFIX}tool_ok": bool(data.get("ok")),
        }
        return _Step("tool_call", event.at, duration, attributes)
    attributes = {}
    usage = data.get("usage")
    if isinstance(usage, dict):
        for key in ("input_tokens", "output_tokens"):
            if isinstance(usage.get(key), int):
                attributes[f"{_PREFIX}{key}"] = usage[key]
    if isinstance(data.get("stop_reason"), str):
        attributes[f"{_PREFIX}stop_reason"] = data["stop_reason"]
    return _Step("model_call", event.at, duration, attributes)


def _identity(record: SessionRecord) -> dict[str, Any]:
    return {
        f"{_PREFIX}session_id": record.session_id,
        f"{_PREFIX}tenant_id": record.tenant_id,
        f"{_PREFIX}model": record.template.model_string,
    }


def _seconds(value: object) -> float | None:
    """``value`` as a duration, or ``None`` if it is not one (a plugin's event)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
