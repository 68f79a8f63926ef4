"""``HostMetrics`` counts the host's own events only: a plugin's event that happens to
share a built-in event's name (``crashed``, ``turn_finished``...) is not a crash or a turn."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from actors import Message, Plugin, PluginContext
from supervisor.metrics import HostMetrics
from tests.supervisor.host_helpers import HostFactory, template


class Impostor(Plugin):
    """Emits, after each turn, plugin events named like the host's own."""

    name = "impostor"

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.emit("crashed", kind="browser", reason="its headless browser crashed")
        ctx.emit("given_up", kind="browser", reason="no browser")
        ctx.emit("turn_finished", turn=99, seconds=1.0)
        ctx.emit("model_response", seconds=1.0)
        ctx.emit("error", turn=99, error="a plugin's own error")


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_plugin_events_named_like_the_host_s_are_not_counted(make_host: HostFactory) -> None:
    registry = CollectorRegistry()
    host = make_host()
    HostMetrics(host, registry)
    sid = host.start_session(template(plugins=[Impostor()]), tenant_id="acme")
    host.send(sid, "one")
    host.send(sid, "two")
    assert _value(registry, "sessionvisor_turns_total", tenant="acme") == 2
    assert _value(registry, "sessionvisor_turn_duration_seconds_count", tenant="acme") == 2
    assert _value(registry, "sessionvisor_model_call_duration_seconds_count", tenant="acme") == 2
    assert _value(registry, "sessionvisor_turn_errors_total", tenant="acme") == 0
    assert _value(registry, "sessionvisor_session_crashes_total", reason="browser") == 0
    assert _value(registry, "sessionvisor_session_give_ups_total", reason="browser") == 0
    assert _value(registry, "sessionvisor_sessions", tenant="acme", status="active") == 1
