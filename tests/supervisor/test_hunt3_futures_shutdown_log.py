"""A non-blocking call the host's shutdown failed while it waited for a helper thread must
not make ``concurrent.futures`` log a CRITICAL "Future ... in unexpected state: FINISHED"
when a helper finally reaches it: the future was resolved (``HostShutDown``) on purpose,
and a shutdown that logs CRITICAL lines for calls it handled as documented alarms users."""

from __future__ import annotations

import logging
import threading

import pytest

from actors import Snapshot
from supervisor import HostShutDown, MemoryCheckpointStore
from supervisor._nonblocking import HELPERS
from tests.supervisor.host_helpers import WAIT, HostFactory, template


class HeldLoads(MemoryCheckpointStore):
    """Each ``load`` waits for ``go`` (bounded): the helper threads reading it stay busy."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Semaphore(0)
        self.go = threading.Event()

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        self.entered.release()
        self.go.wait(WAIT)
        return super().load(session_id, checkpoint_id)


@pytest.mark.parametrize("mode", ["thread"])
def test_a_call_failed_by_shutdown_while_it_waited_for_a_helper_logs_nothing_critical(
    make_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = HeldLoads()
    host = make_host(store=store)
    sid = host.start_session(template())
    assert host.hibernate(sid)
    reads = [host.futures.history(sid) for _ in range(HELPERS)]  # from the checkpoint
    for _ in range(HELPERS):  # every helper thread waits in a load
        assert store.entered.acquire(timeout=WAIT)
    waiting = host.futures.steer(sid, "later")  # no helper free: it waits for one
    shutdown = threading.Thread(target=host.shutdown)
    shutdown.start()
    try:
        assert isinstance(waiting.exception(WAIT), HostShutDown)
    finally:
        store.go.set()
        shutdown.join(WAIT)
    assert not shutdown.is_alive()
    for future in reads:
        future.exception(WAIT)
    critical = [r.getMessage() for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert not critical
