"""The issue's crash test: several clients stream turns (``stream: true``) from a
``sessionvisor serve`` process; the server is SIGKILLed at a random point while
turns are in flight; restarted on the same data directory, it must hold in
history every turn a client received a final answer for, answer normally, and
still know the key. Several rounds on one data directory, and a round in
worker mode (``--workers 2``), whose worker processes must not outlive it."""

from __future__ import annotations

import itertools
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.gateway.serve_process import ServeProcess, create_key, frames, wait_gone

TEMPLATES = ["slow=tests.gateway.agents:make_slow"]
SESSIONS = ["s0", "s1", "s2", "s3"]
CLIENTS = 6  # two sessions have two clients each: their turns queue behind each other


class Answers:
    """The turns clients received a final answer for, per session. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.by_session: dict[str, list[str]] = {s: [] for s in SESSIONS}
        self.count = 0
        self.wrong: list[tuple[str, str]] = []  # (text, an answer that is not its own)
        self.cut = 0  # streams the kill cut after their first event, before their answer
        self.left = 0  # clients of this round that stopped
        self.refused: list[str] = []  # why a client stopped, other than the server going away

    def start_round(self) -> None:
        with self._lock:
            self.left = 0

    def leave(self, why: str | None) -> None:
        """A client stopped: the server went away (``why`` None), or ``why``."""
        with self._cond:
            self.left += 1
            if why is not None:
                self.refused.append(why)
            self._cond.notify_all()

    def add_cut(self) -> None:
        with self._lock:
            self.cut += 1

    def add(self, session_id: str, text: str, answer: str) -> None:
        with self._cond:
            if answer != f"echo: {text}":
                self.wrong.append((text, answer))
            self.by_session[session_id].append(text)
            self.count += 1
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float) -> bool:
        with self._cond:
            return (
                self._cond.wait_for(lambda: self.count >= count or self.left == CLIENTS, timeout)
                and self.count >= count
            )


def _stream_turns(url: str, key: str, session_id: str, prefix: str, answers: Answers) -> None:
    """Stream turns one after another until the server goes away."""
    why: str | None = None
    try:
        why = _stream_until_gone(url, key, session_id, prefix, answers)
    except Exception as exc:  # reported by the test's thread, not lost in this one
        why = f"{session_id}: {exc!r}"
    finally:
        answers.leave(why)


def _stream_until_gone(
    url: str, key: str, session_id: str, prefix: str, answers: Answers
) -> str | None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        for n in range(10_000):
            text = f"{prefix}-t{n}"
            body = {"text": text, "stream": True}
            started = False
            try:
                with c.stream("POST", f"/v1/sessions/{session_id}/messages", json=body) as r:
                    if r.status_code != 200:
                        r.read()
                        return f"{session_id}: {r.status_code} {r.text[:300]}"
                    for kind, data in frames(r.iter_lines()):
                        started = True
                        if kind == "answer":
                            answers.add(session_id, text, data["message"]["content"])
                            started = False
            except httpx.HTTPError:
                if started:
                    answers.add_cut()
                return None
    return None


def _check_history(url: str, key: str, answers: Answers) -> None:
    """Every answered turn is in its session's history: the text, then its answer."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        for session_id, texts in answers.by_session.items():
            messages = []
            cursor: str | None = None
            while True:
                params = {"limit": "500"} if cursor is None else {"limit": "500", "cursor": cursor}
                page = c.get(f"/v1/sessions/{session_id}/history", params=params)
                assert page.status_code == 200, page.text
                messages += [m["content"] for m in page.json()["messages"]]
                cursor = page.json()["next_cursor"]
                if cursor is None:
                    break
            pairs = set(itertools.pairwise(messages))
            lost = [t for t in texts if (t, f"echo: {t}") not in pairs]
            assert lost == [], f"{session_id}: answered turns missing from history: {lost}"
        # the restarted server answers normally
        sent = c.post(f"/v1/sessions/{SESSIONS[0]}/messages", json={"text": "after"})
        assert sent.status_code == 200, sent.text
        assert sent.json()["message"]["content"] == "echo: after"
        answers.add(SESSIONS[0], "after", "echo: after")


def _crash_round(
    server: ServeProcess, key: str, answers: Answers, name: str, pause: Callable[[], float]
) -> None:
    before = answers.count
    answers.start_round()
    threads = [
        threading.Thread(
            target=_stream_turns,
            args=(server.url, key, SESSIONS[i % len(SESSIONS)], f"{name}-c{i}", answers),
        )
        for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    try:
        answered = answers.wait_for(before + CLIENTS, 60)
        assert answered, f"too few turns answered; clients refused: {answers.refused}"
        time.sleep(pause())  # a random point of the streams, not a synchronisation
        children = server.descendants()
    finally:
        server.kill()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert answers.wrong == []
    assert answers.refused == []
    assert wait_gone(children, 30) == set(), "processes outlived the killed server"


@pytest.mark.parametrize(("workers", "rounds"), [(None, 5), (2, 1)], ids=["threads", "workers"])
def test_sigkill_mid_stream_loses_no_answered_turn(
    tmp_path: Path, workers: int | None, rounds: int
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    data = tmp_path / "data"
    key = create_key(data, "acme")
    answers = Answers()
    log = tmp_path / "serve.log"
    server = ServeProcess(data, TEMPLATES, log, workers=workers)
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as c:
            for session_id in SESSIONS:
                made = c.post("/v1/sessions", json={"template": "slow", "session_id": session_id})
                assert made.status_code == 201, made.text
        for n in range(rounds):
            _crash_round(server, key, answers, f"r{n}", lambda: rng.uniform(0.0, 0.5))
            server = ServeProcess(data, TEMPLATES, log, workers=workers)
            _check_history(server.url, key, answers)
        assert answers.cut > 0, "no stream was in flight at a kill"
        children = server.descendants()
        server.signal(signal.SIGTERM)
        assert server.wait(60) == 0, log.read_text()
        assert wait_gone(children, 30) == set(), "processes outlived the stopped server"
    except BaseException:
        print(f"random seed {seed}; {answers.count} answered turns, {answers.cut} cut")
        raise
    finally:
        if server.proc.returncode is None:
            server.kill()
    print(f"random seed {seed}; {answers.count} answered turns, {answers.cut} cut")


def test_a_created_session_never_sent_to_survives_a_sigkill_as_it_was_created(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    key = create_key(data, "acme")
    log = tmp_path / "serve.log"
    auth = {"Authorization": f"Bearer {key}"}
    server = ServeProcess(data, TEMPLATES, log)
    try:
        with httpx.Client(base_url=server.url, headers=auth) as c:
            made = c.post(
                "/v1/sessions",
                json={"template": "slow", "session_id": "quiet", "metadata": {"team": "a"}},
            )
            assert made.status_code == 201, made.text
        server.kill()  # answered 201, never sent a message
        server = ServeProcess(data, TEMPLATES, log)
        with httpx.Client(base_url=server.url, headers=auth) as c:
            again = c.get("/v1/sessions/quiet")
            assert again.status_code == 200, again.text
            assert again.json()["metadata"] == {"team": "a"}
            assert again.json()["created_at"] == made.json()["created_at"]
            assert [s["session_id"] for s in c.get("/v1/sessions").json()["sessions"]] == ["quiet"]
            answer = c.post("/v1/sessions/quiet/messages", json={"text": "hi"})
            assert answer.json()["message"]["content"] == "echo: hi"
        server.signal(signal.SIGTERM)
        assert server.wait(60) == 0, log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()
