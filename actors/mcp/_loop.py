"""``SharedLoop``: the one asyncio event loop every MCP connection of a process runs on.

The mcp SDK is asyncio code; a session runs on a thread of its own (its
actor's, here or in a worker process) and calls tools synchronously. So each
connection hands its coroutines to this loop (``asyncio.run_coroutine_threadsafe``)
and waits for them on the session's thread. One loop serves all connections:
a host with a thousand MCP sessions runs one extra thread, not a thousand.

The loop lives exactly as long as someone holds it: the first ``hold`` starts
its thread, the last ``release`` stops the loop, shuts down its default
executor (where asyncio resolves host names) and joins the thread. A process
with no open MCP connection runs no thread of ours.
"""

from __future__ import annotations

import asyncio
import os
import threading

__all__ = ["SHARED_LOOP", "SharedLoop"]

_JOIN_TIMEOUT = 10.0


class SharedLoop:
    """An event loop on a daemon thread, started by the first holder, ended by the last.

    Thread-safe: ``hold`` and ``release`` may be called from any thread.
    """

    def __init__(self, name: str = "mcp-event-loop") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._holders = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    @property
    def running(self) -> bool:
        """Whether the loop's thread runs (someone holds it)."""
        with self._lock:
            return self._loop is not None

    def hold(self) -> asyncio.AbstractEventLoop:
        """The running loop, started now if nobody held it; pair every call with ``release``."""
        with self._lock:
            self._forget_if_forked()
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_serve, args=(loop,), name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            self._holders += 1
            return self._loop

    def release(self) -> None:
        """Let go of the loop; the last holder stops it and waits for its thread to end.

        Raises:
            RuntimeError: more releases than holds.
        """
        with self._lock:
            self._forget_if_forked()
            if self._holders == 0:
                raise RuntimeError(f"{self.name}: released more often than held")
            self._holders -= 1
            if self._holders or self._loop is None or self._thread is None:
                return
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            loop.call_soon_threadsafe(loop.stop)
        # Outside the lock: a new holder meanwhile starts a loop of its own.
        thread.join(_JOIN_TIMEOUT)

    def _forget_if_forked(self) -> None:
        """In a child made by ``fork`` the parent's loop thread does not exist: start afresh."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._holders = 0
            self._loop = self._thread = None


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The loop thread: run until stopped, then finish what is left and close the loop."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            leftover = asyncio.all_tasks(loop)
            for task in leftover:  # none when every holder closed its connection
                task.cancel()
            if leftover:
                loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


SHARED_LOOP = SharedLoop()
"""The loop of this process's MCP connections."""
