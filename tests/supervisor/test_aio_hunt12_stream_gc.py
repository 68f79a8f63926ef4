"""An ``EventStream`` freed by the garbage collector never unsubscribes on the collecting thread.

A stream its reader dropped inside a reference cycle (held by an object that refers
to itself, by an exception's traceback, ...) is freed by the cyclic GC, which runs on
whatever thread happens to allocate: possibly one inside the session's event buffer,
holding its lock (the session publishing an event, a reader's ``since``). Its
unsubscribing there took that same lock: the thread waited for itself for ever (the
session, or the event loop, hung). The scenario runs in a child process, bounded,
because the hang it guards against cannot be undone in this one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.supervisor.host_helpers import WAIT

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc

    from supervisor import AgentHost, AsyncAgentHost, MemoryCheckpointStore
    from tests.supervisor.host_helpers import template


    class Cycle:
        def __init__(self, stream):
            self.stream = stream
            self.me = self


    host = AgentHost(store=MemoryCheckpointStore())
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template())
    host.send(sid, "one")
    buffer = host._table.live(sid, None).events  # the session's event buffer
    before = len(buffer._subscribers)


    async def main():
        stream = ahost.events(sid)
        await anext(stream)
        Cycle(stream)
        del stream  # only the cycle holds it now
        with buffer._lock:  # as a thread publishing to the session, or reading it
            gc.collect()  # the GC frees the stream here
        await asyncio.sleep(0)  # one loop iteration
        assert len(buffer._subscribers) == before, "the freed stream is still subscribed"
        assert (await ahost.send(sid, "two")).content == "echo: two"


    asyncio.run(main())
    host.shutdown()
    print("ok")
    """
)


def test_a_stream_freed_by_the_gc_inside_the_sessions_buffer_lock_hangs_nothing() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            cwd=Path(__file__).resolve().parents[2],  # the repository: ``tests`` imports
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError("the thread that ran the GC waits for itself") from expired
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
