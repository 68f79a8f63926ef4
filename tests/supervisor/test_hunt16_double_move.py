"""Hunt 16: two moves of one session at once (the node's housekeeping thread finding it
claimed elsewhere, and a call whose save was refused for the same reason) stop it here
once: one ``moved`` event. Each move looked at the session's status, then marked it
stopped, so two that looked before either marked both went on, and subscribers were told
twice that the session moved.

The move is what a cluster node does when another node took the session over (private:
a single host has no other node to lose it to); both moves are held where they mark the
session stopped, each after the other has looked (or, now, as it looks).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from supervisor import SessionNotFound
from tests.supervisor.host_helpers import WAIT, HostFactory, template, watch_events


def test_two_moves_at_once_announce_one(make_host: HostFactory, monkeypatch: Any) -> None:
    host = make_host(call_timeout=WAIT)
    sid = host.start_session(template())
    host.send(sid, "hello")
    events = watch_events(host, sid)
    table = host._table
    mark = table.set
    both_in = threading.Barrier(2, timeout=WAIT)
    held: set[int] = set()

    def held_mark(record: Any, status: Any, ref: Any) -> Any:
        if status == "stopped" and threading.get_ident() not in held:
            held.add(threading.get_ident())  # each move waits for the other here, once
            both_in.wait()
        return mark(record, status, ref)

    monkeypatch.setattr(table, "set", held_mark)
    moves = [threading.Thread(target=host._sessions.lose_id, args=(sid,)) for _ in range(2)]
    for move in moves:
        move.start()
    for move in moves:
        move.join(WAIT)
    assert not any(move.is_alive() for move in moves)
    events.wait_for("moved")
    assert events.types().count("moved") == 1
    with pytest.raises(SessionNotFound):
        host.send(sid, "after")
