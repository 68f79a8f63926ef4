"""``GroupCommit``: saves that arrive together share one transaction and one fsync.

With ``synchronous=FULL`` every SQLite commit fsyncs the WAL, and one fsync
costs far more than the few inserts of a checkpoint. When many sessions
finish a turn at once, their saves queue on the store's lock; instead of
committing them one by one, one caller at a time (the *leader*) takes every
save queued so far and runs them all in one ``BEGIN IMMEDIATE`` ... ``COMMIT``
under the store's lock. Each caller returns only after the commit that holds
its own write, so "durable when ``save`` returns" is unchanged; only the number
of fsyncs drops. No thread of its own: a caller that arrives while a leader
works waits on a lock of its own; the leader releases it once that caller's
batch is done, so it returns at once (not after the next batch's commit, as a
caller queued on the store's lock would), and hands the lead to the first save
that queued meanwhile, which wakes alone to commit the next batch.

Each write of a batch of several runs under its own ``SAVEPOINT``: one that
raises is undone alone and fails only its caller. A batch of one write needs
none (two statements fewer in the commonest batch, a lone save): if it raises,
the transaction is rolled back. A failure of the transaction itself (the
commit, a full disk, a lost connection) fails every save of the batch with that
error, and SQLite's rollback leaves nothing of the batch to be read back.

A store may also write the usual writes of a batch *together* (``together``): a
few multi-row statements for all of them instead of several statements each.
SQLite lets go of the interpreter lock around every statement, and with
thousands of session threads wanting it, a leader running 64 writes of six
statements each waited 384 times per batch to get it back. What ``together``
writes shares one savepoint; if it raises, that is undone and every write of the
batch runs on its own as above, so a bad write still fails alone. A batch of one
write runs it alone: its own statements cost less than the joint ones.

A save may also be queued without a waiting caller (``submit``): it is told its
outcome by a callback once its batch has committed or failed. Nobody then waits to be
handed the lead after that batch, so a leader that finds such a save first in the queue
hands the lead to a thread of the store's own, which commits one batch, hands the lead
on in turn, and tells that batch's saves (see ``_lead`` for who tells whom), then ends.
A session thread need not wait for its batch that way: each thread that waits and
is woken costs a hand-over of the interpreter lock to a thread asleep in the kernel
(about 30 us each on a 2-core VM with a thousand session threads; see
``docs/ARCHITECTURE.md``, "Where checkpoints are written").
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["MAX_BATCH", "Done", "GroupCommit", "Together"]

logger = logging.getLogger("supervisor.store")

MAX_BATCH = 256
"""Most saves one transaction takes; the rest wait for the next. Measured with 1,000 and
3,000 sessions finishing a turn at once (``bench_concurrency``, runs interleaved). While
each save ran its own statements, batches of hundreds made their leader wait for the
interpreter after every statement, and 64 was best. With a batch's usual saves written
together, larger batches mean fewer commits (13-14 instead of 48 for 3,000 turns) and,
with ``tune_interpreter()``, the last answer sooner: 0.61-0.86 s for 1,000 against
0.74-0.78 s at 64, and 1.7-2.2 s for 3,000 against 1.85-3.0 s at 1,024. At 1,024 the
leader's own Python work for a batch grew long enough that at Python's default 5 ms
switch interval the other threads took the interpreter from it again and again (1,000
turns took 1.7-8.7 s against 1.0-4.4 s at 256)."""

T = TypeVar("T")


Done = Callable[[Any, BaseException | None], object]
"""Told a submitted write's outcome: ``(result, None)`` once its batch committed, or
``(None, error)`` (see ``GroupCommit.submit``)."""


class _Pending(Generic[T]):
    """One queued write and, once its batch has committed or failed, its outcome."""

    __slots__ = ("done", "error", "on_done", "result", "wake", "write")

    def __init__(
        self, write: Callable[[sqlite3.Connection], T], on_done: Done | None = None
    ) -> None:
        self.write = write
        self.on_done = on_done  # a submitted write's: nobody waits for it
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None
        self.wake: threading.Lock | None = None  # held while its caller waits


def _new_wake() -> threading.Lock:
    """The lock a waiting save blocks on (its own; a test replaces it to interrupt a wait)."""
    return threading.Lock()


Together = Callable[[sqlite3.Connection, list[Callable[[sqlite3.Connection], Any]]], dict[int, Any]]
"""Writes what it can of a batch's writes in a few statements; returns the index and result
of each write it did (the others run one by one)."""


class GroupCommit:
    """Runs writes to one SQLite connection in shared transactions. Thread-safe.

    Args:
        lock: The lock that guards the connection for every other use too.
        connection: Returns the open connection (raising if the store is closed);
            called by a leader, with ``lock`` held.
        begin: Run once per batch, first in its transaction (checks every write of the
            batch needs; if it raises, the batch fails with that error).
        together: Writes what it can of each batch at once (see the module docstring);
            called with ``lock`` held, inside the batch's transaction.
    """

    def __init__(
        self,
        lock: threading.Lock,
        connection: Callable[[], sqlite3.Connection],
        begin: Callable[[sqlite3.Connection], object] | None = None,
        together: Together | None = None,
    ) -> None:
        self._lock = lock
        self._connection = connection
        self._begin = begin
        self._together = together
        self._queued: list[_Pending[Any]] = []
        self._queue_lock = threading.Lock()
        self._leading = False  # a caller is committing (or about to): the others wait
        self.commits = 0
        """Transactions committed so far (each one fsync with ``synchronous=FULL``)."""

    def run(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``write`` inside a transaction and return its result once that is committed.

        Raises:
            Exception: what ``write`` raised (its changes undone), or what failed the
                shared transaction (nothing of it was committed).
        """
        pending: _Pending[T] = _Pending(write)
        with self._queue_lock:
            self._queued.append(pending)
            lead = not self._leading
            if lead:
                self._leading = True
            else:
                pending.wake = _new_wake()
                pending.wake.acquire()
        if pending.wake is not None:
            lead = self._wait(pending, pending.wake)
        if lead:
            self._lead()
        error, result = _taken(pending)
        if error is not None:
            try:
                if not lead and not isinstance(error, Exception):  # the leader's interrupt
                    raise RuntimeError(f"the commit holding this save was interrupted: {error!r}")
                raise error
            finally:
                del error  # raised, it holds this frame: kept here, a reference cycle
        return result  # type: ignore[no-any-return]  # set by the batch that ran it

    def submit(self, write: Callable[[sqlite3.Connection], Any], on_done: Done) -> None:
        """Queue ``write`` for a batch without waiting for it. ``on_done(result, None)``, or
        ``on_done(None, error)`` (what ``write`` raised, its changes undone, or what failed
        the shared transaction), is called once, after its batch committed or failed: on
        this thread, before ``submit`` returns, when no batch was under way (it leads
        one); else on a thread of the store's own, which holds no lead then (so
        ``on_done`` may save again, and wait for that). One that raises is logged.
        """
        pending: _Pending[Any] = _Pending(write, on_done)
        with self._queue_lock:
            self._queued.append(pending)
            if self._leading:
                return
            self._leading = True
        self._lead(pending)

    def _wait(self, pending: _Pending[Any], wake: threading.Lock) -> bool:
        """Wait until ``pending``'s batch is done (``False``) or the lead is handed to it
        (``True``). Interrupted (``KeyboardInterrupt`` in the main thread), a save still
        queued is withdrawn (it never runs) and a lead already handed to it is passed on."""
        try:
            wake.acquire()  # released when its batch is done, or when handed the lead
        except BaseException:
            with self._queue_lock:
                if not pending.done and pending in self._queued:
                    self._queued.remove(pending)
                    handed = not wake.locked()  # the lead was handed to it: pass it on
                    unled = handed and self._hand_on()
                else:
                    unled = False
            if unled:
                self._start_own(self._lead, own_thread=True)
            raise
        return not pending.done

    def _hand_on(self) -> bool:
        """Wake the first queued save to lead the next batch, or give the lead up; whether
        the first is a submitted one, whose batch a thread of the store's own must lead
        (``_start_own``, once ``_queue_lock`` is let go). Called with ``_queue_lock``
        held, by the caller that leads."""
        if not self._queued:
            self._leading = False
            return False
        following = self._queued[0].wake
        if following is None:  # submitted: nobody waits to be handed the lead
            return True
        following.release()  # it finds its save not done: it leads
        return False

    def _lead(self, mine: _Pending[Any] | None = None, *, own_thread: bool = False) -> None:
        """Commit the saves queued so far (the leader's own first among them; ``MAX_BATCH``
        at most), wake their callers, hand the lead to the first save still queued (or give
        it up), then tell the submitted saves of the batch how they ended: ``mine`` (the
        caller's own) here, the others here only on a thread of the store's own
        (``own_thread``), else on one started for them.

        A session's thread that leads tells no other session: a subscriber of that session
        run by it could wait for this very thread (a call to its session), which would not
        answer until the call timed out. Nor does a thread tell while it holds the lead: a
        subscriber's call that saves (a ``send`` from a ``turn_finished``) would wait for a
        commit nobody made."""
        with self._queue_lock:
            batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
        try:
            with self._lock:
                self._commit(batch)
        finally:
            for pending in batch:
                if pending.wake is not None:
                    pending.wake.release()
            with self._queue_lock:
                unled = self._hand_on()
            if unled:
                self._start_own(self._lead, own_thread=True)
            others = [p for p in batch if p.on_done is not None and p is not mine]
            if own_thread:
                _tell(others)
            elif others:
                self._start_own(_tell, others)
            if mine is not None:
                _tell([mine])

    @staticmethod
    def _start_own(target: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        """Run ``target`` on a thread of the store's own: to lead the submitted saves now
        first in the queue (the lead is already its: ``_leading`` stays set), or to tell
        submitted saves how they ended."""
        threading.Thread(
            target=target, args=args, kwargs=kwargs, name="sessionvisor-commit", daemon=True
        ).start()

    def _commit(self, batch: list[_Pending[Any]]) -> None:
        try:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self._begin is not None:
                    self._begin(conn)
                if len(batch) == 1:  # its failure is the transaction's: no savepoint needed
                    batch[0].result = batch[0].write(conn)
                else:
                    alone = batch if self._together is None else self._write_together(conn, batch)
                    for pending in alone:
                        self._run_one(conn, pending)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # SQLite may have rolled back already
                    conn.execute("ROLLBACK")
                raise
            self.commits += 1
        except BaseException as exc:
            for pending in batch:
                if pending.error is None:
                    pending.error = exc
                pending.result = None
        finally:
            for pending in batch:
                pending.done = True

    def _write_together(
        self, conn: sqlite3.Connection, batch: list[_Pending[Any]]
    ) -> list[_Pending[Any]]:
        """Let ``together`` write what it can of ``batch``; the writes left to run alone
        (all of them if it raised: what it wrote is undone)."""
        assert self._together is not None
        conn.execute("SAVEPOINT together")
        try:
            done = self._together(conn, [pending.write for pending in batch])
        except Exception:
            if not conn.in_transaction:  # SQLite ended the whole transaction: fail the batch
                raise
            conn.execute("ROLLBACK TO together")
            done = {}
        conn.execute("RELEASE together")
        alone = []
        for index, pending in enumerate(batch):
            if index in done:
                pending.result = done[index]
            else:
                alone.append(pending)
        return alone

    @staticmethod
    def _run_one(conn: sqlite3.Connection, pending: _Pending[Any]) -> None:
        conn.execute("SAVEPOINT one_save")
        try:
            pending.result = pending.write(conn)
        except Exception as exc:
            if not conn.in_transaction:  # SQLite ended the whole transaction: fail the batch
                raise
            conn.execute("ROLLBACK TO one_save")
            pending.error = exc
        conn.execute("RELEASE one_save")


def _tell(batch: list[_Pending[Any]]) -> None:
    """Tell each submitted save of ``batch`` its outcome (one whose batch never ran, the
    leader interrupted before its commit, as a ``RuntimeError``). A handler that raises,
    whatever it raises, is logged: the saves after it must be told all the same."""
    for pending in batch:
        on_done = pending.on_done
        if on_done is None:
            continue
        ran = pending.done
        error, result = _taken(pending)
        if not ran:
            error = RuntimeError("the commit holding this save was interrupted before it ran")
        try:
            on_done(None if error is not None else result, error)
        except BaseException:
            logger.exception("a submitted save's completion handler failed")


def _taken(pending: _Pending[Any]) -> tuple[BaseException | None, Any]:
    """``pending``'s error and result, which it no longer holds: the error's traceback holds
    the frames of its batch's commit, and those hold the batch's saves (their locals, and
    their callers' through ``f_back``). A save still holding its error made a reference
    cycle of every failed save."""
    taken = pending.error, pending.result
    pending.error = pending.result = None
    return taken
