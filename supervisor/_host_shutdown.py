"""``HostShutdown``: an ``AgentHost``'s shutdown, run once, by ``shutdown`` or at exit.

The steps, in order: stop the hibernation sweeper; take every running
session's final checkpoint (a session being restarted keeps its last one),
on up to ``FINAL_SAVERS`` threads at once, so that the saves share group
commits instead of paying an fsync each (3,000 sessions, one by one on a
loaded machine: 2.6 s of a 3.1 s shutdown);
stop the sessions, all at once (the root supervisors' concurrent shutdown: the
sessions are independent, so sessions stuck in ``session_end`` cost one
``call_timeout`` together, not one each); end the sessions' stops (their
``when_stopped`` watchers: event streams end once they read what the sessions
published, so after what their copies published as they stopped, a plugin's
failing ``session_end``; a session that did not stop in time is given up on,
its stream ended all the same); close the runtime (workers are
stopped and joined); fail the non-blocking calls still unresolved and stop
their threads; give up ownership (a cluster node drains: other nodes take its
sessions over at once); close the store if the host owns it. A step that
fails is logged and the next ones still run.

A host never shut down is shut down at interpreter exit, once the main thread
has finished and before Python joins the actors' non-daemon threads (see
``supervisor._at_exit``).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Sequence

import pykka

from supervisor import _at_exit
from supervisor._hibernation import Sweeper
from supervisor._host_record import SessionRecord
from supervisor._incarnations import Incarnations
from supervisor._runtime import SessionRuntime
from supervisor._session_table import SessionTable

__all__ = ["FINAL_SAVERS", "HostShutdown"]

logger = logging.getLogger("supervisor.host")

FINAL_SAVERS = 8
"""Most threads (the shutting-down one included) taking final checkpoints at once."""


class HostShutdown:
    """Shuts one host down exactly once. Thread-safe: concurrent calls wait for the one
    that runs (at exit, up to ``timeout``; ``run`` returns at once).

    Args:
        table: The host's records (closing it decides which call runs).
        sessions: The host's incarnations (final checkpoints, root supervisor).
        runtime: What runs the sessions; closed after they stopped.
        sweeper: The hibernation sweeper, if any.
        stop_adopting: Stops the node taking sessions over, first (a closed table
            cannot run them).
        drain: Gives up the host's ownership of its sessions (a node's drain).
        close_store: Closes the store the host owns, if it owns one.
        close_calls: Ends the host's non-blocking calls (``NonBlockingCalls.close``).
        timeout: Seconds an at-exit call waits for a shutdown another thread runs.
        owner: The host, registered to shut down at exit (weakly: it may be
            collected); its ``_shutdown_at_exit`` calls this object's.
    """

    def __init__(
        self,
        table: SessionTable,
        sessions: Incarnations,
        runtime: SessionRuntime,
        *,
        sweeper: Sweeper | None,
        stop_adopting: Callable[[], None],
        drain: Callable[[], None],
        close_store: Callable[[], None] | None,
        close_calls: Callable[[], None] | None = None,
        timeout: float,
        owner: _at_exit.ShutsDownAtExit,
    ) -> None:
        self._table = table
        self._sessions = sessions
        self._runtime = runtime
        self._sweeper = sweeper
        self._stop_adopting = stop_adopting
        self._drain = drain
        self._close_store = close_store
        self._close_calls = close_calls
        self._timeout = timeout
        self._done = threading.Event()
        self._exit_token = _at_exit.register(owner)

    def run(self) -> None:
        """Shut down now, unless another call did or does."""
        self._stop_adopting()  # before the table closes: no take-over may start on it
        records = self._table.close()
        if records is None:
            return
        _at_exit.unregister(self._exit_token)
        self._stop_all()

    def at_exit(self) -> None:
        """``run`` at interpreter exit, on the main thread; if another thread is already
        shutting the host down, wait for it, up to ``timeout``."""
        self._stop_adopting()
        if self._table.close() is None:
            logger.debug("waiting for another thread's shutdown of a host at exit")
            self._done.wait(self._timeout)
            return
        logger.info("shutting down an AgentHost left running at interpreter exit")
        self._stop_all()

    def _stop_all(self) -> None:
        """Every step, in order, each even if one before it failed: a step that fails is
        logged and the next ones still run, so the workers, the calls' threads, the
        ownership and the store (its data-directory lock) are always released, and
        every session's stop watchers called, once; the first failure is raised once
        all have run."""
        steps: list[Callable[[], object]] = []
        if self._sweeper is not None:
            steps.append(self._sweeper.stop)
        steps += [
            lambda: self._final_checkpoints(self._table.records()),
            self._stop_sessions,
            self._table.end_stops,  # once the copies ended (or were given up on)
        ]
        steps.append(self._runtime.close)
        if self._close_calls is not None:
            steps.append(self._close_calls)
        steps.append(self._drain)
        if self._close_store is not None:
            steps.append(self._close_store)
        first: Exception | None = None
        try:
            for step in steps:
                try:
                    step()
                except Exception as exc:
                    logger.exception("a step of an AgentHost's shutdown failed; going on")
                    first = first or exc
        finally:
            try:  # skipped by a ``BaseException``, it runs here (no stream left waiting);
                self._table.end_stops()  # once its step ran, it calls no watcher again
            finally:
                self._done.set()
        if first is not None:
            raise first

    def _stop_sessions(self) -> None:
        """Stop the sessions all at once (the root supervisors' concurrent shutdown). A
        supervisor busy past ``call_timeout`` (a restart whose ``session_start`` hangs)
        is asked to stop them once it is free: the shutdown goes on meanwhile, as for a
        session that does not stop in time."""
        try:
            abandoned = self._sessions.supervisors.stop()
        except pykka.Timeout:
            logger.warning(
                "a sessions' supervisor was busy for longer than call_timeout (a session's "
                "start that hangs?); it stops its sessions once that start is over"
            )
            return
        if abandoned:
            logger.warning("sessions that did not stop in time: %s", abandoned)

    def _final_checkpoints(self, records: Sequence[SessionRecord]) -> None:
        """Take every record's final checkpoint and mark it stopped: this thread and up to
        ``FINAL_SAVERS - 1`` more take them from one queue. At interpreter exit, where no
        thread may start any more, this thread takes them all."""
        queue = collections.deque(records)

        def take() -> None:
            while True:
                try:
                    record = queue.popleft()
                except IndexError:
                    return
                self._final_checkpoint(record)

        helpers: list[threading.Thread] = []
        for index in range(min(FINAL_SAVERS, len(records)) - 1):
            helper = threading.Thread(
                target=take, name=f"sessionvisor-final-checkpoint-{index}", daemon=True
            )
            try:
                helper.start()
            except RuntimeError:  # the interpreter is shutting down
                break
            helpers.append(helper)
        take()
        for helper in helpers:
            helper.join()

    def _final_checkpoint(self, record: SessionRecord) -> None:
        """Take ``record``'s final checkpoint and mark it stopped (no call reaches it any
        more); its stop watchers are called later (``end_stops``), once its copy ended."""
        try:
            self._sessions.final_checkpoint(record)
        except Exception:
            logger.exception(
                "final checkpoint of %r failed",
                record.session_id,
                extra={"session_id": record.session_id},
            )
        self._table.set(record, "stopped", None)
