"""``HostMetrics``: the host's Prometheus metrics (issue 16, observability), in every mode."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from supervisor import SessionFailed
from supervisor.metrics import HostMetrics
from tests.supervisor.host_helpers import (
    WAIT,
    FlakyModel,
    HostFactory,
    ModelDown,
    template,
    watch_events,
)


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_turns_model_calls_and_checkpoints_are_counted_per_tenant(
    make_host: HostFactory,
) -> None:
    registry = CollectorRegistry()
    host = make_host()
    HostMetrics(host, registry)
    acme = host.start_session(template(), tenant_id="acme")
    other = host.start_session(template(), tenant_id="other")
    for text in ("one", "two", "three"):
        host.send(acme, text)
    host.send(other, "hello")

    assert _value(registry, "sessionvisor_turns_total", tenant="acme") == 3
    assert _value(registry, "sessionvisor_turns_total", tenant="other") == 1
    assert _value(registry, "sessionvisor_turn_duration_seconds_count", tenant="acme") == 3
    assert _value(registry, "sessionvisor_model_call_duration_seconds_count", tenant="acme") == 3
    turn_time = _value(registry, "sessionvisor_turn_duration_seconds_sum", tenant="acme")
    model_time = _value(registry, "sessionvisor_model_call_duration_seconds_sum", tenant="acme")
    assert 0 < model_time <= turn_time
    # A durable checkpoint after every turn: four saves, each of a real snapshot's size.
    assert _value(registry, "sessionvisor_checkpoint_save_duration_seconds_count") == 4
    sizes = _value(registry, "sessionvisor_checkpoint_size_bytes_sum")
    assert sizes >= 4 * len(host.store.load(other).serialize()) * 0.5
    assert _value(registry, "sessionvisor_sessions", tenant="acme", status="active") == 1


def test_the_session_gauge_follows_hibernation_and_stops(make_host: HostFactory) -> None:
    registry = CollectorRegistry()
    host = make_host()
    HostMetrics(host, registry)
    first = host.start_session(template(), tenant_id="acme")
    second = host.start_session(template(), tenant_id="acme")
    assert host.hibernate(first)
    assert _value(registry, "sessionvisor_sessions", tenant="acme", status="active") == 1
    assert _value(registry, "sessionvisor_sessions", tenant="acme", status="hibernated") == 1
    host.stop_session(second)
    host.stop_session(first)
    assert _value(registry, "sessionvisor_sessions", tenant="acme", status="active") == 0
    assert _value(registry, "sessionvisor_sessions", tenant="acme", status="hibernated") == 0


def test_crashes_restarts_and_give_ups_are_counted_by_kind(make_host: HostFactory) -> None:
    registry = CollectorRegistry()
    host = make_host(max_restarts=1, max_seconds=60.0)
    HostMetrics(host, registry)
    sid = host.start_session(template())
    waiter = watch_events(host, sid)
    host.kill(sid, reason="test")
    waiter.wait_for("resumed")
    assert _value(registry, "sessionvisor_session_crashes_total", reason="killed") == 1
    assert _value(registry, "sessionvisor_session_restarts_total") == 1

    host.kill(sid, reason="test again")  # the second within the window: given up
    waiter.wait_for("given_up")
    assert _value(registry, "sessionvisor_session_crashes_total", reason="killed") == 2
    assert _value(registry, "sessionvisor_session_give_ups_total", reason="killed") == 1
    assert _value(registry, "sessionvisor_session_restarts_total") == 1
    with pytest.raises(SessionFailed):
        host.send(sid, "anyone there?")


def test_a_failed_turn_is_an_error_not_a_turn(make_host: HostFactory) -> None:
    registry = CollectorRegistry()
    host = make_host()
    HostMetrics(host, registry)
    sid = host.start_session(template(model=FlakyModel()))
    with pytest.raises(ModelDown):
        host.send(sid, "!fail now")
    host.send(sid, "fine")
    assert _value(registry, "sessionvisor_turn_errors_total", tenant="default") == 1
    assert _value(registry, "sessionvisor_turns_total", tenant="default") == 1


def test_turns_from_many_threads_are_all_counted(make_host: HostFactory) -> None:
    registry = CollectorRegistry()
    host = make_host()
    metrics = HostMetrics(host, registry)
    sessions = [host.start_session(template(), tenant_id=f"t{i % 2}") for i in range(4)]
    barrier = threading.Barrier(len(sessions))

    def drive(sid: str) -> None:
        barrier.wait(WAIT)
        for turn in range(10):
            host.send(sid, f"turn {turn}")

    threads = [threading.Thread(target=drive, args=(sid,)) for sid in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 6)
    assert not any(thread.is_alive() for thread in threads)
    assert _value(registry, "sessionvisor_turns_total", tenant="t0") == 20
    assert _value(registry, "sessionvisor_turns_total", tenant="t1") == 20
    assert metrics.registry is registry


def test_the_exposition_parses_and_names_every_metric(make_host: HostFactory) -> None:
    registry = CollectorRegistry()
    host = make_host()
    HostMetrics(host, registry)
    host.send(host.start_session(template()), "hello")
    names = {
        family.name for family in text_string_to_metric_families(generate_latest(registry).decode())
    }
    assert {
        "sessionvisor_sessions",
        "sessionvisor_turns",
        "sessionvisor_turn_errors",
        "sessionvisor_turn_duration_seconds",
        "sessionvisor_model_call_duration_seconds",
        "sessionvisor_checkpoint_save_duration_seconds",
        "sessionvisor_checkpoint_size_bytes",
        "sessionvisor_session_crashes",
        "sessionvisor_session_restarts",
        "sessionvisor_session_give_ups",
        "sessionvisor_worker_deaths",
        "sessionvisor_event_buffer_dropped",
    } <= names


def test_a_registry_takes_one_host_s_metrics(make_host: HostFactory) -> None:
    registry = CollectorRegistry()
    HostMetrics(make_host(), registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        HostMetrics(make_host(), registry)
