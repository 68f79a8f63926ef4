"""``Sweeper``: the background thread that hibernates an ``AgentHost``'s idle sessions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Sweeper"]

logger = logging.getLogger("supervisor.host")


class Sweeper(threading.Thread):
    """Calls ``sweep`` (the host's ``hibernate_idle``) every ``interval`` seconds until
    stopped; started at once. A daemon thread: it holds no session and never blocks exit.
    ``stop`` is thread-safe; a failing sweep is logged and the next one runs."""

    def __init__(self, sweep: Callable[[], object], interval: float) -> None:
        super().__init__(name="sessionvisor-hibernate", daemon=True)
        self._sweep = sweep
        self._interval = interval
        self._stopped = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._sweep()
            except Exception:
                logger.exception("hibernation sweep failed")

    def stop(self) -> None:
        """Stop sweeping and wait for a sweep in progress to finish."""
        self._stopped.set()
        self.join()
