"""A host's sessions spread over root supervisors: a slow start holds up only its own
partition's starts and restarts, never the whole host's."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import Future

import pytest

from actors import Plugin, PluginContext
from supervisor import AgentHost, MemoryCheckpointStore
from supervisor._partitions import PARTITIONS, SessionSupervisors, partition_of
from tests.supervisor.host_helpers import WAIT, assert_threads_back, template, thread_only


def test_a_session_s_partition_is_stable_and_sessions_spread_over_all() -> None:
    assert partition_of("abc", 16) == 891568578 % 16  # CRC-32, the same in every process
    assert partition_of("\udcff", 16) == partition_of("\udcff", 16)  # lone surrogates too

    counts = Counter(partition_of(f"session-{n}", PARTITIONS) for n in range(3200))

    assert sorted(counts) == list(range(PARTITIONS))
    assert min(counts.values()) > 100  # 200 each on average


def test_no_supervisors_at_all_is_refused() -> None:
    with pytest.raises(ValueError, match="count must be at least 1 supervisor, got 0"):
        SessionSupervisors(0, name="none")


class SlowStart(Plugin):
    """The start of the session ``slow_id`` waits for ``release``."""

    def __init__(self, slow_id: str) -> None:
        self.slow_id = slow_id
        self.started = threading.Event()
        self.release = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        if ctx.session_id == self.slow_id:
            self.started.set()
            self.release.wait(WAIT)


def _ids_outside(partition: int, count: int) -> list[str]:
    ids = (f"other-{n}" for n in range(1000))
    return [sid for sid in ids if partition_of(sid, PARTITIONS) != partition][:count]


@thread_only("the plugin's gate is an Event shared with the test in this process")
def test_a_slow_session_start_does_not_hold_up_other_partitions(mode: str) -> None:
    slow = SlowStart("slow")
    host = AgentHost(store=MemoryCheckpointStore(), call_timeout=WAIT)
    try:
        restarted_id, new_id = _ids_outside(partition_of("slow", PARTITIONS), 2)
        host.start_session(template(plugins=[slow]), restarted_id)
        host.send(restarted_id, "before")
        slow_start: Future[str] = Future()
        threading.Thread(
            target=lambda: slow_start.set_result(
                host.start_session(template(plugins=[slow]), "slow")
            )
        ).start()
        assert slow.started.wait(WAIT)

        # While "slow" is still starting: a start, and a crash restart, elsewhere.
        host.start_session(template(plugins=[slow]), new_id)
        assert host.send(new_id, "hi", timeout=WAIT).content == "echo: hi"
        host.kill(restarted_id)
        assert host.send(restarted_id, "after", timeout=WAIT).content == "echo: after"
        assert not slow_start.done()

        slow.release.set()
        assert slow_start.result(WAIT) == "slow"
        assert host.send("slow", "late", timeout=WAIT).content == "echo: late"
    finally:
        slow.release.set()
        host.shutdown()


def test_a_host_s_supervisors_all_stop_at_shutdown() -> None:
    before = set(threading.enumerate())
    host = AgentHost(store=MemoryCheckpointStore())
    started = [t for t in threading.enumerate() if t not in before]
    for n in range(40):
        host.start_session(template(), f"s{n}")

    host.shutdown()

    assert len(started) == PARTITIONS  # one thread per supervisor
    assert_threads_back(before)
