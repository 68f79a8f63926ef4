"""Subscribers calling the host for other sessions of their worker, under concurrent sends.

In process mode a subscriber runs on the thread that delivers its session's frame.
Before, that thread held the worker's pipe for the whole delivery: a subscriber whose
call needed another thread to read the pipe (a stop or hibernation, answered to the
session's proxy thread; a session's lock held by a caller waiting for its own reply)
waited out ``call_timeout``, and the worker was killed for it. Now the thread hands the
pipe on before it delivers, and frames of the session being delivered are held back for
it, so each session's events stay in order.

Four sessions on one worker, a thread sending to each; every ``turn_finished`` has its
subscriber call the host: ``history``, ``checkpoint`` or ``steer`` of the next session,
or ``hibernate`` or ``send`` (which wakes it) of an idle partner session of its own. The
last session's subscriber only steers the first (then reads its partner's history): a
ring of subscribers each waiting for the next session would wait on itself in thread
mode too (each session's thread waits for the next one's, which runs its own
subscriber). Every call must come back well within ``call_timeout``, the worker must
survive, each session's events must stay in order, and every steering text must reach
its session exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from actors import AgentTemplate, Event
from supervisor import AgentHost, MemoryCheckpointStore

_CALL_TIMEOUT = 6.0
"""The host's ``call_timeout``: a subscriber call waiting it out fails the test."""

_SESSIONS = 4
_SENDS = 40
_ACTIONS = ("history", "checkpoint", "steer", "hibernate", "send")
_LAST_STEERS = 12
"""Steering texts the last session's subscriber sends the first (fewer than a steering queue
holds: the first session may have had its last turn); then it reads its partner's history."""
_OWN = ("hibernate", "send")
"""The actions on the subscriber's idle partner session rather than the next session."""


@pytest.fixture(params=["epoll", "portable"])
def host(request: pytest.FixtureRequest) -> Iterator[AgentHost]:
    made = AgentHost(
        MemoryCheckpointStore(), workers=1, call_timeout=_CALL_TIMEOUT, worker_io=request.param
    )
    yield made
    made.shutdown()


class _Relay:
    """Subscribers that call the host for another session; records what each call took."""

    def __init__(self, host: AgentHost, sids: list[str], partners: list[str]) -> None:
        self.host = host
        self.sids = sids
        self.partners = partners
        self.on = True
        self.took: list[tuple[str, float]] = []
        self.failed: list[BaseException] = []
        self.steered: dict[str, list[str]] = {sid: [] for sid in sids}
        self.streams: dict[str, list[Event]] = {sid: [] for sid in sids}
        self._lock = threading.Lock()
        self._count = 0

    def subscriber(self, index: int) -> Callable[[Event], None]:
        source = self.sids[index]
        following = self.sids[(index + 1) % len(self.sids)]
        partner = self.partners[index]
        last = index == len(self.sids) - 1

        def relay(event: Event) -> None:
            self.streams[source].append(event)
            if event.type != "turn_finished" or not self.on:
                return
            with self._lock:
                self._count += 1
                action = _ACTIONS[self._count % len(_ACTIONS)]
                target = partner if action in _OWN else following
                if last:  # steer the first session, never past its queue's room
                    room = len(self.steered[following]) < _LAST_STEERS
                    action, target = ("steer", following) if room else ("history", partner)
                text = f"steer {target[:6]} #{self._count}"
            began = time.monotonic()
            try:
                self._act(action, target, text)
            except BaseException as exc:
                self.failed.append(exc)
            finally:
                self.took.append((action, time.monotonic() - began))

        return relay

    def _act(self, action: str, target: str, text: str) -> None:
        if action == "steer":
            self.host.steer(target, text)
            self.steered[target].append(text)
        elif action == "checkpoint":
            self.host.checkpoint(target, "from a subscriber")
        elif action == "send":
            assert self.host.send(target, text).content == f"echo: {text}"
        else:
            getattr(self.host, action)(target)


def test_subscribers_call_other_sessions_of_their_worker_while_threads_send(
    host: AgentHost,
) -> None:
    sids = [host.start_session(AgentTemplate()) for _ in range(_SESSIONS)]
    partners = [host.start_session(AgentTemplate()) for _ in range(_SESSIONS)]
    [worker] = host.workers()
    relay = _Relay(host, sids, partners)
    for index, sid in enumerate(sids):
        host.subscribe(sid, relay.subscriber(index))

    def drive(sid: str) -> list[str | None]:
        return [host.send(sid, f"{sid[:6]} {n}").content for n in range(_SENDS)]

    with ThreadPoolExecutor(_SESSIONS) as pool:
        answers = list(pool.map(drive, sids))
    relay.on = False
    for sid in sids:  # one more turn each, to take the steering still queued
        host.send(sid, "last")

    assert not relay.failed, relay.failed
    assert len(relay.took) == _SESSIONS * _SENDS
    assert answers == [[f"echo: {sid[:6]} {n}" for n in range(_SENDS)] for sid in sids]
    slow = [(action, round(took, 2)) for action, took in relay.took if took > _CALL_TIMEOUT / 3]
    assert not slow  # none waited for a pipe nobody read
    assert host.workers()[0].pid == worker.pid  # never killed for a late answer
    assert host.worker_deaths == 0
    for sid in sids:
        user_texts = [m.content for m in host.history(sid) if m.role == "user"]
        for text in relay.steered[sid]:
            assert user_texts.count(text) == 1, (text, user_texts)
        kinds = [e.type for e in relay.streams[sid] if e.type.startswith("turn_")]
        assert kinds == ["turn_started", "turn_finished"] * (len(kinds) // 2)
        seqs = [e.seq for e in relay.streams[sid]]
        assert seqs == sorted(seqs)
