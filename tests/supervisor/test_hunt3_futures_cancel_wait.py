"""A call withdrawn from its session's queue by ``cancel()`` is done for
``concurrent.futures.wait`` and ``as_completed`` too, as a cancelled executor job is:
they used to wait for it until their timeout (a call withdrawn from its session's
queue) or until a helper thread came free (a lifecycle call waiting for one), for the
future was not told it would not run (``set_running_or_notify_cancel``), which is what
notifies those waiters."""

from __future__ import annotations

from concurrent.futures import Future, as_completed, wait
from typing import Any

import pytest

from supervisor._nonblocking import HELPERS
from tests.supervisor.host_helpers import WAIT, Fifo, HostFactory, pairs, template, watch_events
from tests.supervisor.test_host_futures import held_session
from tests.supervisor.test_hunt3_futures_shutdown_log import HeldLoads


def test_a_cancelled_queued_call_is_done_for_wait_and_as_completed(
    make_host: HostFactory, fifo: Fifo
) -> None:
    host = make_host()
    sid = held_session(host, fifo)
    waiter = watch_events(host, sid)
    running = host.futures.send(sid, "running")
    waiter.wait_for("turn_started")
    queued = host.futures.send(sid, "queued")
    stop = host.futures.stop_session(sid)
    assert queued.cancel()
    assert stop.cancel()
    cancelled: list[Future[Any]] = [queued, stop]
    done, not_done = wait(cancelled, timeout=0)  # told at once
    assert done == set(cancelled)
    assert not not_done
    assert set(as_completed(cancelled, timeout=0)) == set(cancelled)
    fifo.release(2)
    assert running.result(WAIT).content == "echo: running"
    assert host.futures.send(sid, "after", timeout=WAIT).result(WAIT).content == "echo: after"


@pytest.mark.parametrize("mode", ["thread"])
def test_a_call_cancelled_while_it_waits_for_a_helper_is_done_for_wait_at_once(
    make_host: HostFactory,
) -> None:
    store = HeldLoads()
    host = make_host(store=store)
    sid = host.start_session(template())
    host.send(sid, "before")
    assert host.hibernate(sid)
    reads = [host.futures.history(sid) for _ in range(HELPERS)]  # from the checkpoint
    for _ in range(HELPERS):  # every helper thread waits in a load
        assert store.entered.acquire(timeout=WAIT)
    waiting = host.futures.steer(sid, "never")  # no helper free: it waits for one
    try:
        assert waiting.cancel()
        done, _ = wait([waiting], timeout=0)  # at once, not once a helper frees up
        assert done == {waiting}
    finally:
        store.go.set()
    for future in reads:
        assert pairs(future.result(WAIT)) == [("before", "echo: before")]
