"""The worker's writes to its pipe: replies, failures, and sessions' events.

Events a session publishes while it handles a call are held back and written
with the call's reply, in the same frame, so a quick turn costs one frame
instead of one per event. Before a slow step (see ``_remote_session``) the
events held so far are written on their own (``FrameWriter.flush``), so a
consumer watching the stream still sees them while that step runs.

Frames are written from any thread: one lock keeps each frame whole, and a
session's own ``HostedSession.lock`` keeps its events and replies in the order
they happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

from actors import Event, EventBuffer
from supervisor.workers._frames import write_frame
from supervisor.workers._hosted_session import HostedSession
from supervisor.workers._memory_limit import explained
from supervisor.workers._protocol import POKE, encode_error, pack, pack_escaped

__all__ = ["EventRelay", "FrameWriter"]

_POKE = pack({"op": POKE})


class FrameWriter:
    """Writes the worker's frames on ``conn``. Thread-safe.

    Args:
        conn: The worker's end of the pipe (read elsewhere, by ``WorkerPipe``).
        memory_limit: The worker's RLIMIT_AS, to explain a thread that could not start.
    """

    def __init__(self, conn: Connection, memory_limit: int | None = None) -> None:
        self.conn = conn
        self._memory_limit = memory_limit
        self._send_lock = threading.Lock()

    def write(self, frame: dict[str, Any]) -> None:
        """Write a frame that may be shown altered (see ``pack_escaped``): anything but an
        answer, which ``answer`` encodes strictly."""
        self._send(pack_escaped(frame))

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            try:  # noqa: SIM105 (contextlib.suppress costs three Python calls per frame)
                write_frame(self.conn, data)
            except OSError:  # parent gone: nobody to tell
                pass

    def poke(self) -> None:
        """Have the parent write a ``poke`` back: it ends a session's read of the pipe."""
        self._send(_POKE)

    def reply(self, call_id: int, payload: Any) -> None:
        """Answer a call that belongs to no session (or whose session has gone)."""
        self.write({"id": call_id, "ok": True, "payload": payload})

    def fail(self, call_id: int, exc: BaseException) -> None:
        """Fail a call (see ``reply``); a thread that could not start under the worker's
        memory limit is explained (``_memory_limit.explained``)."""
        error = explained(exc, self._memory_limit)
        self.write({"id": call_id, "ok": False, "error": encode_error(error)})

    def answer(self, hosted: HostedSession, frame: dict[str, Any]) -> None:
        """Write the reply ``frame`` of ``hosted``'s running call, with the events it held back.

        Raises:
            Exception: the answer's payload cannot be encoded (text with lone
                surrogates, an integer out of range, out of memory); an error or
                events that cannot are sent escaped. The call stays pending and its
                events held: the session must die, and its death answers the call
                (``SessionCrashed`` in the host, at once) and writes the events.
        """
        with hosted.lock:
            events = hosted.batch
            if events:
                frame["session"] = hosted.session_id
                frame["events"] = events
            data = _pack_answer(frame)
            hosted.pending.discard(frame["id"])
            hosted.running = None
            hosted.batch = None
            self._send(data)

    def relay(self, hosted: HostedSession, type_: str, data: dict[str, Any]) -> None:
        """An event of ``hosted``: held back while it handles a call, else written now."""
        with hosted.lock:
            batch = hosted.batch
            if batch is None:
                self.write(
                    {"op": "event", "session": hosted.session_id, "type": type_, "data": data}
                )
                return
            batch.append([type_, data])

    def relay_now(self, hosted: HostedSession, type_: str, data: dict[str, Any]) -> None:
        """An event a consumer waits for while the call runs (a streamed delta): written now,
        on the calling thread, in one frame after the events held back so far."""
        with hosted.lock:
            batch = hosted.batch
            if batch:
                batch.append([type_, data])
                hosted.batch = []
                events = batch
            else:
                events = [[type_, data]]
            self.write(_events_frame(hosted, events))

    def flush(self, hosted: HostedSession) -> None:
        """Write the events ``hosted`` held back so far (before a slow step of its call)."""
        with hosted.lock:
            self.write_held(hosted)

    def write_held(self, hosted: HostedSession) -> None:
        """Write the events ``hosted`` held back so far (caller holds ``hosted.lock``)."""
        if hosted.batch:
            events = hosted.batch
            hosted.batch = []
            self.write(_events_frame(hosted, events))


def _events_frame(hosted: HostedSession, events: list[list[Any]]) -> dict[str, Any]:
    """An ``events`` frame of ``hosted`` (the caller holds ``hosted.lock``), naming the call
    that published them (``"call"``) if one runs: they are part of its reply, written ahead,
    and a subscriber ending the session on one of them fails that call in the parent, as it
    would if they came with the reply (``WorkerClient._push``)."""
    frame: dict[str, Any] = {"op": "events", "session": hosted.session_id, "events": events}
    if hosted.running is not None:
        frame["call"] = hosted.running
    return frame


def _pack_answer(frame: dict[str, Any]) -> bytes:
    """A reply frame, encoded: an answer's payload exactly or not at all (it raises), while
    an error and the events the call held back may go escaped (see ``pack_escaped``)."""
    try:
        return pack(frame)
    except Exception:
        if frame.get("ok"):
            pack({"payload": frame.get("payload")})  # raises if the answer itself cannot go
        return pack_escaped(frame)  # escaping leaves encodable text as it is


class EventRelay(EventBuffer):
    """The event buffer of a session in a worker: relays each event to the parent, keeps none.

    The parent's buffer is the session's stream (it outlives this process);
    ``since`` here is always empty.
    """

    def __init__(self, writer: FrameWriter, hosted: HostedSession) -> None:
        super().__init__(1)
        self._writer = writer
        self._hosted = hosted

    def publish(self, type_: str, **data: Any) -> Event:
        hosted = self._hosted
        with hosted.lock:  # ``FrameWriter.relay``'s usual case, inlined: several per turn
            batch = hosted.batch
            if batch is not None:
                batch.append([type_, data])
        if batch is None:
            self._writer.relay(hosted, type_, data)
        # ``Event(...)`` without the Python-level ``__new__`` of named tuples.
        event: Event = tuple.__new__(Event, (0, type_, data, time.time()))
        return event

    def publish_all(self, events: Iterable[tuple[str, dict[str, Any]]]) -> None:
        for type_, data in events:
            self._writer.relay(self._hosted, type_, data)

    def publish_now(self, type_: str, **data: Any) -> Event:
        self._writer.relay_now(self._hosted, type_, data)
        return Event(0, type_, data, time.time())
