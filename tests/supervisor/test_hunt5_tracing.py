"""``HostTracing`` builds a turn's spans from the session's own events only: a plugin's
event named like one of them is no model call, no tool call, and no turn boundary."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from actors import ModelResponse, Plugin, PluginContext
from supervisor.tracing import HostTracing
from tests.supervisor.host_helpers import HostFactory, template


class Impostor(Plugin):
    """Emits, in the middle of each turn, plugin events named like the session's own."""

    name = "impostor"

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> None:
        ctx.emit("model_response", seconds=0.5)
        ctx.emit("tool_result", name="fake", ok=False, seconds=0.5)
        ctx.emit("error", turn=1, error="a plugin's own error")
        ctx.emit("turn_started", turn=7)


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


def _named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == f"sessionvisor.{name}"]


def test_plugin_events_named_like_a_turn_s_steps_make_no_spans(
    make_host: HostFactory, exporter: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, spans = exporter
    host = make_host()
    HostTracing(host, provider)
    sid = host.start_session(template(plugins=[Impostor()]), tenant_id="acme")
    host.send(sid, "hello")

    finished = spans.get_finished_spans()
    (turn,) = _named(finished, "turn")
    (model,) = _named(finished, "model_call")
    assert _named(finished, "tool_call") == []
    assert turn.status.status_code is StatusCode.UNSET
    assert turn.attributes is not None
    assert turn.attributes["sessionvisor.turn"] == 1
    assert model.parent is not None
    assert turn.context is not None
    assert model.parent.span_id == turn.context.span_id
