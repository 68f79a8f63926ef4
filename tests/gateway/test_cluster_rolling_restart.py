"""Issue 17's rolling restart: three ``sessionvisor serve`` nodes on one PostgreSQL
schema are restarted one at a time (SIGTERM: drain; exit 0; a new process under the
same node id, at the same address) while clients send turns without pause. No
acknowledged turn may be lost, and a drained node's sessions must move at once, not
after its lease's TTL.

"At once" is checked without timing anything (speed is the benchmarks' business): the
drain leaves none of the node's sessions owned by it, and the TTL and the sweep
interval are far longer than the deadline of every wait, so a session that needed
either to move would stall its client past that deadline and fail the test. The
durations measured are printed, for a reader, and never asserted.

The clients play a load balancer's part: they spread their requests over the nodes
in rotation (half of them stream their turns, ``stream: true``), and a node leaves
the rotation before it is sent SIGTERM and joins it again once its new process
answers. A retryable 503 (``Retry-After``, or a streamed ``error`` frame) is
retried, after the time it asks for, as a new turn with a text of its own (a 503
after the request reached the owner may mean the turn ran), and so is a request
whose connection broke; both are recorded. Every other answer fails the test.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import psycopg.sql
import pytest

from gateway.routing import NODE_HEADER
from tests.gateway.cluster_nodes import WAIT, ServeProcess
from tests.gateway.serve_process import cli, descendants, frames, wait_gone

TTL = 3600.0  # its sweep (TTL / 4) too is far past every wait's deadline (WAIT)
TEMPLATES = ["slow=tests.gateway.agents:make_slow"]  # turns of ~0.1 s: some are in flight
NODE_IDS = ("a", "b", "c")
CLIENTS = 6
SESSIONS_PER_CLIENT = 2
WARM_UP_TURNS = 3  # turns every client has answered before the first restart
TURNS_BETWEEN_RESTARTS = 3  # turns every client has answered since the last restart
REQUEST_TIMEOUT = 2 * WAIT  # a deadline, not a speed limit: a turn takes ~0.1 s


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request of a turn: where it went, when, and what came back."""

    session_id: str
    text: str
    node_id: str  # the node the client sent it to
    sent: float  # time.monotonic()
    ended: float
    status: int | None  # None: the connection failed
    served_by: str = ""  # X-Sessionvisor-Node of the answer
    detail: str = ""  # the answer's body, or the connection's error
    retry_after: float | None = None

    @property
    def acknowledged(self) -> bool:
        return self.status == 200


class Rotation:
    """The nodes a load balancer sends to, in turn. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._urls: dict[str, str] = {}
        self._turn = itertools.count()

    def add(self, node_id: str, url: str) -> None:
        with self._lock:
            self._urls[node_id] = url

    def remove(self, node_id: str) -> None:
        with self._lock:
            del self._urls[node_id]

    def pick(self) -> tuple[str, str]:
        with self._lock:
            ids = sorted(self._urls)
            node_id = ids[next(self._turn) % len(ids)]
            return node_id, self._urls[node_id]


class Load:
    """Every attempt of every client, and the acknowledged turns per client. Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.attempts: list[Attempt] = []
        self.acked = [0] * CLIENTS
        self.stop = threading.Event()
        self.failures: list[str] = []  # a client thread's unexpected end

    def record(self, client: int, attempt: Attempt) -> None:
        with self._cond:
            self.attempts.append(attempt)
            if attempt.acknowledged:
                self.acked[client] += 1
            self._cond.notify_all()

    def fail(self, why: str) -> None:
        with self._cond:
            self.failures.append(why)
            self._cond.notify_all()

    def acked_now(self) -> list[int]:
        with self._cond:
            return list(self.acked)

    def wait_acked(self, floor: list[int], more: int, timeout: float) -> bool:
        """Wait until every client acknowledged ``more`` turns past ``floor`` (or one failed)."""
        with self._cond:
            return (
                self._cond.wait_for(
                    lambda: (
                        bool(self.failures)
                        or all(n >= f + more for n, f in zip(self.acked, floor, strict=True))
                    ),
                    timeout,
                )
                and not self.failures
            )

    def wait_served_via(self, node_id: str, since: float, timeout: float) -> bool:
        """Wait until a request sent to ``node_id`` after ``since`` was acknowledged."""
        with self._cond:
            return self._cond.wait_for(
                lambda: any(
                    a.acknowledged and a.node_id == node_id and a.sent >= since
                    for a in self.attempts
                ),
                timeout,
            )


def _send_turns(client: int, key: str, rotation: Rotation, load: Load) -> None:
    try:
        _turns_until_stopped(client, key, rotation, load)
    except Exception as exc:  # reported by the test's thread, not lost in this one
        load.fail(f"client {client}: {exc!r}")


def _turns_until_stopped(client: int, key: str, rotation: Rotation, load: Load) -> None:
    """Send the client's sessions turns in turn, each through the next node in rotation,
    one at a time, until ``load.stop``; a failed turn is sent again under a new text."""
    sessions = [f"c{client}s{n}" for n in range(SESSIONS_PER_CLIENT)]
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(headers=headers, timeout=REQUEST_TIMEOUT) as http:
        for turn in itertools.count():
            session_id = sessions[turn % len(sessions)]
            for retry in itertools.count():
                if load.stop.is_set():
                    return
                text = f"{session_id}-t{turn}.{retry}"
                node_id, url = rotation.pick()
                attempt = _attempt(http, url, node_id, session_id, text, client % 2 == 1)
                load.record(client, attempt)
                if attempt.acknowledged:
                    break
                if attempt.status is None:  # the node went away: another one, at once
                    continue
                if attempt.status != 503 or attempt.retry_after is None:
                    why = f"{text!r} via {node_id}: {attempt.status} {attempt.detail}"
                    raise AssertionError(why)
                load.stop.wait(attempt.retry_after)  # as the client is told


def _attempt(  # noqa: PLR0917 (one request's particulars)
    http: httpx.Client, url: str, node_id: str, session_id: str, text: str, stream: bool
) -> Attempt:
    """Send one turn to the node at ``url`` (``stream``: as ``stream: true``); what came
    back. A streamed turn is acknowledged by its ``answer`` frame; an ``error`` frame in
    its place counts as that error's status (a retryable 503 is sent again in 1 s)."""
    sent = time.monotonic()
    path = f"{url}/v1/sessions/{session_id}/messages"
    try:
        if stream:
            status, content, served_by, retry_after = _streamed(http, path, text)
        else:
            answer = http.post(path, json={"text": text})
            status, served_by = answer.status_code, answer.headers.get(NODE_HEADER, "")
            content = answer.json()["message"]["content"] if status == 200 else answer.text
            retry_after = answer.headers.get("Retry-After")
    except httpx.TransportError as exc:
        return Attempt(session_id, text, node_id, sent, time.monotonic(), None, detail=repr(exc))
    if status == 200 and content != f"echo: {text}":
        raise AssertionError(f"{text!r} answered {content!r}")
    return Attempt(
        session_id, text, node_id, sent, time.monotonic(), status, served_by=served_by,
        detail=content[:300], retry_after=None if retry_after is None else float(retry_after),
    )  # fmt: skip


def _streamed(http: httpx.Client, path: str, text: str) -> tuple[int | None, str, str, str | None]:
    """A streamed turn's status (``None``: the stream ended without an answer or an
    error), its answer or problem, the node that served it, and the Retry-After."""
    with http.stream("POST", path, json={"text": text, "stream": True}) as response:
        served_by = response.headers.get(NODE_HEADER, "")
        if response.status_code != 200:
            response.read()
            return (
                response.status_code, response.text, served_by,
                response.headers.get("Retry-After"),
            )  # fmt: skip
        for kind, data in frames(response.iter_lines()):
            if kind == "answer":
                return 200, str(data["message"]["content"]), served_by, None
            if kind == "error":
                retry_after = "1" if data["status"] == 503 else None
                return int(data["status"]), json.dumps(data), served_by, retry_after
    return None, "the stream ended without an answer", served_by, None


def _history(http: httpx.Client, url: str, session_id: str) -> list[str]:
    """Every message of the session's history, read a page at a time through ``url``."""
    messages: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "500"} if cursor is None else {"limit": "500", "cursor": cursor}
        page = http.get(f"{url}/v1/sessions/{session_id}/history", params=params)
        assert page.status_code == 200, page.text
        messages += [m["content"] for m in page.json()["messages"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return messages


def _check_history(session_id: str, messages: list[str], attempts: list[Attempt]) -> None:
    """The history is a subsequence of the session's attempts in the order they were sent,
    each turn its text then its answer, holding every acknowledged one once."""
    texts = messages[0::2]
    assert messages[1::2] == [f"echo: {t}" for t in texts], f"{session_id}: turns broken up"
    assert len(set(texts)) == len(texts), f"{session_id}: a turn is in history twice"
    sent = [a.text for a in attempts]  # one client sends a session's turns one at a time
    position = {text: index for index, text in enumerate(sent)}
    unknown = [t for t in texts if t not in position]
    assert unknown == [], f"{session_id}: turns nobody sent: {unknown}"
    order = [position[t] for t in texts]
    assert order == sorted(order), f"{session_id}: history out of the order sent"
    in_history = set(texts)
    lost = [a.text for a in attempts if a.acknowledged and a.text not in in_history]
    assert lost == [], f"{session_id}: acknowledged turns missing from history: {lost}"


def _longest_turns(attempts: list[Attempt]) -> dict[str, float]:
    """Per session: the longest time from a turn's first request to its acknowledgement
    (through every retry of it): what a client of the session waited at most."""
    first: dict[str, float] = {}
    longest: dict[str, float] = {}
    for attempt in attempts:
        turn = attempt.text.rpartition(".")[0]
        first.setdefault(turn, attempt.sent)
        if attempt.acknowledged:
            waited = attempt.ended - first[turn]
            longest[attempt.session_id] = max(longest.get(attempt.session_id, 0.0), waited)
    return longest


def _answered_again(
    attempts: list[Attempt], sessions: list[str], stopped: float, exited: float
) -> float:
    """Seconds from a node's SIGTERM (at ``stopped``) until each of ``sessions`` (its own)
    had a turn sent after its exit (at ``exited``) acknowledged: elsewhere, so moved."""
    answered: dict[str, float] = {}
    for attempt in attempts:
        if attempt.acknowledged and attempt.sent >= exited and attempt.session_id in sessions:
            answered.setdefault(attempt.session_id, attempt.ended)
    missing = set(sessions) - set(answered)
    assert not missing, f"sessions never answered after their node's restart: {missing}"
    return max(answered.values()) - stopped


def _described(attempt: Attempt, stops: dict[str, tuple[float, float]]) -> str:
    """Where ``attempt`` went and when, against the last SIGTERM before it."""
    where = f"{attempt.text} to {attempt.node_id}: {attempt.status} from {attempt.served_by!r}"
    before = [(start, n) for n, (start, _) in stops.items() if start <= attempt.sent]
    if not before:
        return where
    start, node_id = max(before)
    return f"{where}, sent {attempt.sent - start:.2f} s after {node_id}'s SIGTERM"


def _owned_by(dsn: str, schema: str, node_id: str) -> list[str]:
    """The sessions ``node_id`` owns now (the gateway's ids: without the tenant's prefix),
    read from the cluster's ``sessions`` table."""
    query = psycopg.sql.SQL("SELECT session_id FROM {}.sessions WHERE owner_node = %s")
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(query.format(psycopg.sql.Identifier(schema)), (node_id,)).fetchall()
    return sorted(str(row[0]).rpartition("/")[2] for row in rows)


@pytest.fixture
def processes() -> Iterator[list[ServeProcess]]:
    """The serve processes a test starts; stopped at its end, none left behind."""
    baseline = descendants(os.getpid())
    started: list[ServeProcess] = []
    try:
        yield started
    finally:
        for node in started:
            node.close()
        pids = {node.process.pid for node in started}
        assert wait_gone(pids, WAIT) == set(), "serve processes outlived the test"
        assert wait_gone(descendants(os.getpid()) - baseline, WAIT) == set()


@pytest.mark.timeout(300)  # a deadline: three restarts under load on a busy machine
def test_a_rolling_restart_under_load_loses_no_acknowledged_turn_and_waits_no_ttl(
    pg_dsn: str, pg_schema: str, tmp_path: Path, processes: list[ServeProcess]
) -> None:
    def start(node_id: str, port: int | None = None) -> ServeProcess:
        node = ServeProcess(pg_dsn, pg_schema, tmp_path, node_id, TTL, TEMPLATES, port)
        processes.append(node)
        return node

    nodes = {node_id: start(node_id) for node_id in NODE_IDS}
    where = ["--data-dir", str(tmp_path), "--postgres", pg_dsn, "--postgres-schema", pg_schema]
    made = cli("keys", "create", *where, "--tenant", "acme")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    rotation = Rotation()
    for node_id, node in nodes.items():
        rotation.add(node_id, node.url)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(headers=headers, timeout=WAIT) as http:  # owners spread over the nodes
        for index, session_id in enumerate(
            f"c{c}s{n}" for c in range(CLIENTS) for n in range(SESSIONS_PER_CLIENT)
        ):
            url = nodes[NODE_IDS[index % len(NODE_IDS)]].url
            body = {"template": "slow", "session_id": session_id}
            created = http.post(f"{url}/v1/sessions", json=body)
            assert created.status_code == 201, created.text

    load = Load()
    clients = [
        threading.Thread(target=_send_turns, args=(c, key, rotation, load), name=f"client-{c}")
        for c in range(CLIENTS)
    ]
    for thread in clients:
        thread.start()
    exits: dict[str, int] = {}
    moved: dict[str, list[str]] = {}  # node id -> the sessions it owned at its SIGTERM
    stops: dict[str, tuple[float, float]] = {}  # node id -> (SIGTERM sent, process exited)
    try:
        assert load.wait_acked([0] * CLIENTS, WARM_UP_TURNS, WAIT), load.failures
        for node_id in NODE_IDS:
            old = nodes[node_id]
            rotation.remove(node_id)  # out of the load balancer's rotation, then stopped
            moved[node_id] = _owned_by(pg_dsn, pg_schema, node_id)
            stopped_at = time.monotonic()
            old.process.terminate()
            exits[node_id] = old.process.wait(WAIT)
            stops[node_id] = (stopped_at, time.monotonic())
            assert exits[node_id] == 0, f"node {node_id} exited {exits[node_id]} on SIGTERM"
            # drained: no lease of it is left to wait out (its new incarnation is not up)
            assert _owned_by(pg_dsn, pg_schema, node_id) == [], f"{node_id} kept sessions"
            floor = load.acked_now()
            port = int(old.url.rsplit(":", 1)[1])
            new = nodes[node_id] = start(node_id, port)  # a new incarnation, same address
            rejoined = time.monotonic()
            rotation.add(node_id, new.url)
            assert load.wait_acked(floor, TURNS_BETWEEN_RESTARTS, WAIT), load.failures
            assert load.wait_served_via(node_id, rejoined, WAIT), f"{node_id} serves nothing"
    finally:
        load.stop.set()
        for thread in clients:
            thread.join(REQUEST_TIMEOUT + WAIT)
    assert not any(thread.is_alive() for thread in clients)
    assert load.failures == []

    attempts = load.attempts
    by_session: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_session.setdefault(attempt.session_id, []).append(attempt)
    with httpx.Client(headers=headers, timeout=WAIT) as http:
        for index, (session_id, sent) in enumerate(sorted(by_session.items())):
            via = nodes[NODE_IDS[index % len(NODE_IDS)]].url
            _check_history(session_id, _history(http, via, session_id), sent)
            after = http.post(f"{via}/v1/sessions/{session_id}/messages", json={"text": "after"})
            assert after.status_code == 200, after.text  # every session still answers
            assert after.json()["message"]["content"] == "echo: after"

    moved_in = {
        node_id: _answered_again(attempts, sessions, *stops[node_id])
        for node_id, sessions in moved.items()
    }
    gaps = _longest_turns(attempts)
    slowest = max(attempts, key=lambda a: a.ended - a.sent)
    longest_request = slowest.ended - slowest.sent
    longest_gap = max(gaps.values())
    retried = [a for a in attempts if not a.acknowledged]
    acknowledged = sum(a.acknowledged for a in attempts)
    forwarded = sum(a.acknowledged and a.served_by != a.node_id for a in attempts)
    print(
        f"rolling restart: {acknowledged} acknowledged turns ({forwarded} forwarded), "
        f"{len(retried)} retried attempts "
        f"({sum(a.status == 503 for a in retried)} 503, "
        f"{sum(a.status is None for a in retried)} broken connections); drains "
        + ", ".join(f"{n} {end - start:.2f} s" for n, (start, end) in stops.items())
        + "; a drained node's sessions all answered again "
        + ", ".join(f"{n} {s:.2f} s" for n, s in moved_in.items())
        + " after its SIGTERM"
        + f"; longest request {longest_request:.2f} s ({_described(slowest, stops)})"
        + ", longest wait of a session "
        f"{longest_gap:.2f} s (TTL {TTL:.0f} s)"
    )
    assert all(len(owned) > 0 for owned in moved.values()), moved  # each drain moved sessions
    assert exits == dict.fromkeys(NODE_IDS, 0)
