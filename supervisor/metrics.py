"""Prometheus metrics of an ``AgentHost`` (optional extra ``sessionvisor[metrics]``).

``HostMetrics(host)`` registers the host's metrics in a
``prometheus_client`` registry (the global one unless given), which any
Prometheus exposition serves (``prometheus_client.start_http_server``, the
gateway's ``/metrics``, ``generate_latest``):

=============================================== =========== ======================
metric                                          type        labels
=============================================== =========== ======================
``sessionvisor_sessions``                       gauge       tenant, status
``sessionvisor_turns_total``                    counter     tenant
``sessionvisor_turn_errors_total``              counter     tenant
``sessionvisor_turn_duration_seconds``          histogram   tenant
``sessionvisor_model_call_duration_seconds``    histogram   tenant
``sessionvisor_checkpoint_save_duration_seconds`` histogram (none)
``sessionvisor_checkpoint_size_bytes``          histogram   (none)
``sessionvisor_session_crashes_total``          counter     reason
``sessionvisor_session_restarts_total``         counter     (none)
``sessionvisor_session_give_ups_total``         counter     reason
``sessionvisor_worker_deaths_total``            counter     (none)
``sessionvisor_event_buffer_dropped``           gauge       tenant
=============================================== =========== ======================

Turns, model calls, crashes and give-ups are counted from the sessions' events
(``turn_finished`` and ``model_response`` carry their ``seconds``; ``crashed``
and ``given_up`` their ``kind``, a small set: ``killed`` or an exception's type
name), never from a plugin's own (those carry its ``plugin``), whatever their
name; checkpoint saves from the host's one checkpoint writer; the session
counts, worker deaths and dropped events are read when the registry is
collected. Nothing is counted before ``HostMetrics`` is made, and a host
without one pays nothing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from actors import Event
from supervisor._host_record import SessionRecord
from supervisor.checkpoint_store import CheckpointInfo

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

    from supervisor.host import AgentHost

__all__ = ["HostMetrics"]

_SIZE_BUCKETS = tuple(float(1 << n) for n in range(8, 31, 2))  # 256 B .. 1 GiB
_TURN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class HostMetrics:
    """Collects one host's metrics into a Prometheus registry. Thread-safe: the counters
    are updated on the threads that publish events and save checkpoints.

    Args:
        host: The host to watch, for its whole life.
        registry: Where the metrics are registered; ``prometheus_client.REGISTRY``
            by default. Two hosts in one process need a registry each.

    Raises:
        ImportError: ``prometheus-client`` is not installed (``pip install
            'sessionvisor[metrics]'``).
        ValueError: (from ``prometheus_client``) the registry has these metrics already.
    """

    def __init__(self, host: AgentHost, registry: CollectorRegistry | None = None) -> None:
        try:
            import prometheus_client as prom  # noqa: PLC0415 (an optional extra)
        except ImportError as exc:  # pragma: no cover - the test environment has it
            raise ImportError(
                "HostMetrics needs prometheus-client: pip install 'sessionvisor[metrics]'"
            ) from exc
        self._host = host
        self.registry = on = prom.REGISTRY if registry is None else registry
        self.turns = prom.Counter("sessionvisor_turns", "Turns answered.", ["tenant"], registry=on)
        self.turn_errors = prom.Counter(
            "sessionvisor_turn_errors", "Turns that failed (rolled back).", ["tenant"], registry=on
        )
        self.turn_seconds = prom.Histogram(
            "sessionvisor_turn_duration_seconds",
            "Seconds from a turn's start to its answer (tools and model calls included).",
            ["tenant"],
            buckets=_TURN_BUCKETS,
            registry=on,
        )
        self.model_seconds = prom.Histogram(
            "sessionvisor_model_call_duration_seconds",
            "Seconds one model call took.",
            ["tenant"],
            buckets=_TURN_BUCKETS,
            registry=on,
        )
        self.save_seconds = prom.Histogram(
            "sessionvisor_checkpoint_save_duration_seconds",
            "Seconds one durable checkpoint save took.",
            registry=on,
        )
        self.save_bytes = prom.Histogram(
            "sessionvisor_checkpoint_size_bytes",
            "Size of each saved checkpoint (its snapshot's serialized size).",
            buckets=_SIZE_BUCKETS,
            registry=on,
        )
        self.crashes = prom.Counter(
            "sessionvisor_session_crashes",
            "Sessions that died abnormally, by kind of reason.",
            ["reason"],
            registry=on,
        )
        self.restarts = prom.Counter(
            "sessionvisor_session_restarts",
            "Crashed sessions resumed by the supervisor.",
            registry=on,
        )
        self.give_ups = prom.Counter(
            "sessionvisor_session_give_ups",
            "Sessions given up after too many crashes, by kind of the last reason.",
            ["reason"],
            registry=on,
        )
        # Crashed sessions whose next "resumed" is a restart, each with what withdraws the
        # watcher that drops it when the session is stopped first (stop_session, moved,
        # shutdown): one stopped between its crash and its restart never resumes.
        self._crashed: dict[SessionRecord, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self.registry.register(_ReadAtCollection(host))
        host._checkpoints.observe(self._saved)
        host._table.tap(self._event)

    def _saved(self, info: CheckpointInfo, seconds: float) -> None:
        self.save_seconds.observe(seconds)
        self.save_bytes.observe(info.size)

    def _event(self, record: SessionRecord, event: Event) -> None:
        if "plugin" in event.data:
            return  # a plugin's own event, whatever its name: never a turn or a crash
        kind = event.type
        if kind == "model_response":
            self._observe_seconds(self.model_seconds, record, event)
        elif kind == "turn_finished":
            self.turns.labels(record.tenant_id).inc()
            self._observe_seconds(self.turn_seconds, record, event)
        elif kind == "error" and "turn" in event.data:
            self.turn_errors.labels(record.tenant_id).inc()
        elif kind == "crashed":
            self.crashes.labels(_kind(event)).inc()
            self._await_restart(record)
        elif kind == "resumed":
            if self._forget(record):
                self.restarts.inc()
        elif kind == "given_up":
            self.give_ups.labels(_kind(event)).inc()
            self._forget(record)

    @property
    def awaiting_restart(self) -> int:
        """How many crashed sessions still wait for their restart (none once each is
        resumed, given up, stopped or moved). Thread-safe."""
        with self._lock:
            return len(self._crashed)

    def _await_restart(self, record: SessionRecord) -> None:
        """Note a crash; dropped again if the session is stopped before it resumes."""
        mark = functools.partial(_nothing)  # a fresh object: this crash's place-holder
        with self._lock:
            earlier = self._crashed.pop(record, None)
            self._crashed[record] = mark
        if earlier is not None:
            earlier()
        # Outside the lock: a session stopped already calls the watcher at once.
        withdraw = self._host._table.when_stopped(record, functools.partial(self._stopped, record))
        with self._lock:
            if self._crashed.get(record) is mark:
                self._crashed[record] = withdraw
                return
        withdraw()  # resumed, given up or stopped meanwhile: the watcher is not needed

    def _stopped(self, record: SessionRecord) -> None:
        self._forget(record)

    def _forget(self, record: SessionRecord) -> bool:
        """Drop a crashed session (and its stop watcher); whether it was there."""
        with self._lock:
            withdraw = self._crashed.pop(record, None)
        if withdraw is None:
            return False
        withdraw()
        return True

    @staticmethod
    def _observe_seconds(histogram: Any, record: SessionRecord, event: Event) -> None:
        seconds = event.data.get("seconds")
        if isinstance(seconds, int | float) and seconds >= 0:
            histogram.labels(record.tenant_id).observe(seconds)


def _nothing() -> None:
    """Withdraws nothing: the stand-in while a crashed session's stop watcher is added."""


def _kind(event: Event) -> str:
    kind = event.data.get("kind")
    return kind if isinstance(kind, str) else "unknown"


class _ReadAtCollection:
    """The metrics read from the host when the registry is collected (a custom collector)."""

    def __init__(self, host: AgentHost) -> None:
        self._host = host

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (  # noqa: PLC0415 (an optional extra)
            CounterMetricFamily,
            GaugeMetricFamily,
        )

        sessions = GaugeMetricFamily(
            "sessionvisor_sessions",
            "Sessions the host has, by tenant and status (active, hibernated, ...).",
            labels=["tenant", "status"],
        )
        dropped = GaugeMetricFamily(
            "sessionvisor_event_buffer_dropped",
            "Events dropped because a session's event buffer was full, over the sessions "
            "the host has now.",
            labels=["tenant"],
        )
        counts: dict[tuple[str, str], int] = {}
        lost: dict[str, int] = {}
        for record in self._host._table.records():
            status = record.status
            if status == "stopped":
                continue
            key = (record.tenant_id, status)
            counts[key] = counts.get(key, 0) + 1
            lost[record.tenant_id] = lost.get(record.tenant_id, 0) + record.events.dropped
        for (tenant, state), count in sorted(counts.items()):
            sessions.add_metric([tenant, state], count)
        for tenant, count in sorted(lost.items()):
            dropped.add_metric([tenant], count)
        deaths = CounterMetricFamily(
            "sessionvisor_worker_deaths",
            "Worker processes that died (killed, crashed, timed out), shutdown excepted.",
        )
        deaths.add_metric([], self._host.worker_deaths)
        yield sessions
        yield dropped
        yield deaths
