"""``HostTracing``: OpenTelemetry spans of turns, model calls, tool calls and checkpoints
(issue 16, observability), checked with the SDK's in-memory exporter in every mode."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from supervisor.tracing import HostTracing
from tests.supervisor.host_helpers import FlakyModel, HostFactory, ModelDown, template


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == f"sessionvisor.{name}"]


def test_a_tool_turn_is_a_turn_span_with_its_model_and_tool_calls_inside(
    make_host: HostFactory, exporter: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, spans = exporter
    host = make_host()
    HostTracing(host, provider)
    sid = host.start_session(template(), tenant_id="acme")
    host.send(sid, '/add {"a": 2, "b": 3}')

    finished = spans.get_finished_spans()
    (turn,) = _named(finished, "turn")
    models = _named(finished, "model_call")
    (tool,) = _named(finished, "tool_call")
    assert len(models) == 2  # the call that asked for the tool, then the answer
    for span in (turn, *models, tool):
        assert span.attributes is not None
        assert span.attributes["sessionvisor.session_id"] == sid
        assert span.attributes["sessionvisor.tenant_id"] == "acme"
        assert span.attributes["sessionvisor.model"] == "echo"
    for child in (*models, tool):
        assert child.parent is not None
        assert turn.context is not None
        assert child.context is not None
        assert child.parent.span_id == turn.context.span_id
        assert child.context.trace_id == turn.context.trace_id
        assert turn.start_time is not None
        assert turn.end_time is not None
        assert child.start_time is not None
        assert child.end_time is not None
        assert turn.start_time <= child.start_time <= child.end_time <= turn.end_time
    assert tool.attributes is not None
    assert tool.attributes["sessionvisor.tool"] == "add"
    assert tool.attributes["sessionvisor.tool_ok"] is True
    assert turn.status.status_code is StatusCode.UNSET
    (checkpoint,) = _named(finished, "checkpoint")
    assert checkpoint.attributes is not None
    assert checkpoint.attributes["sessionvisor.session_id"] == sid
    size = checkpoint.attributes["sessionvisor.checkpoint_bytes"]
    assert isinstance(size, int)
    assert size > 0


def test_a_failed_turn_s_span_has_status_error(
    make_host: HostFactory, exporter: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, spans = exporter
    host = make_host()
    HostTracing(host, provider)
    sid = host.start_session(template(model=FlakyModel()))
    with pytest.raises(ModelDown):
        host.send(sid, "!fail please")
    (turn,) = _named(spans.get_finished_spans(), "turn")
    assert turn.status.status_code is StatusCode.ERROR
    assert "provider unavailable" in (turn.status.description or "")
    assert _named(spans.get_finished_spans(), "checkpoint") == []  # nothing was saved
