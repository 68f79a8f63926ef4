"""Steering under worker deaths: every accepted steering text is used exactly once.

Two threads steer a session with unique texts while a third keeps sending
turns and the test SIGKILLs the session's worker again and again. A text
may sit in the host's queue, in the worker's queue, or in a turn that dies
with its worker; whichever it is, once the storm is over and one last turn
has run, it must be in the session's durable history exactly once: never
lost with a worker, never injected twice.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

from actors import Event, SteeringQueueFull
from supervisor import AgentHost, MemoryCheckpointStore, SessionCrashed
from tests.supervisor.host_helpers import WAIT, template
from tests.supervisor.workers.worker_tools import worker_pid

KILLS = 20
STEERERS = 2
DRAIN = 60.0
"""Seconds the threads get to end once the storm stops. The turn in flight then carries
every text queued meanwhile: with a history of 200,000-270,000 messages by then (and a
``MemoryCheckpointStore``, which copies it whole at each checkpoint) it took 3.2-4.6 s,
so ``WAIT`` (5 s) failed about 1 run in 8 on a busy machine."""


def test_every_accepted_steering_text_is_used_once_across_worker_deaths() -> None:
    with AgentHost(MemoryCheckpointStore(), workers=2, max_restarts=1000) as host:
        sid = host.start_session(template(), max_steering_queue=10_000)
        resumed = threading.Semaphore(0)

        def on_event(event: Event) -> None:
            if event.type == "resumed":
                resumed.release()

        host.subscribe(sid, on_event)
        stop = threading.Event()
        accepted: list[list[str]] = [[] for _ in range(STEERERS)]

        def steer(index: int) -> None:
            count = 0
            while not stop.is_set():
                text = f"steer {index}-{count}"
                count += 1
                try:
                    host.steer(sid, text)
                except SteeringQueueFull:  # refused: it must never be used
                    continue
                accepted[index].append(text)

        def drive() -> None:
            count = 0
            while not stop.is_set():
                count += 1
                try:
                    host.send(sid, f"turn {count}")
                except SessionCrashed:  # not acknowledged; the next one goes on
                    continue

        threads = [threading.Thread(target=steer, args=(i,)) for i in range(STEERERS)]
        threads.append(threading.Thread(target=drive))
        for thread in threads:
            thread.start()
        try:
            for _ in range(KILLS):
                os.kill(worker_pid(host, sid), signal.SIGKILL)
                assert resumed.acquire(timeout=WAIT), "the session was not resumed"
        finally:
            stop.set()
            for thread in threads:
                thread.join(DRAIN)
        assert not any(thread.is_alive() for thread in threads)

        host.send(sid, "last")  # takes whatever steering is still waiting

        used = Counter(
            m.content
            for m in host.history(sid)
            if m.role == "user" and (m.content or "").startswith("steer ")
        )
        every = [text for texts in accepted for text in texts]
        assert len(every) > KILLS  # the steering really raced the kills
        assert [text for text, n in used.items() if n > 1] == []
        assert [text for text in every if used[text] != 1] == []
        assert set(used) == set(every)
