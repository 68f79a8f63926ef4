"""A streamed send forwards its own turn's events only: not those of a turn queued
before it on the same session (of the same text or not), nor those of another streamed
send of the same text."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import KeyStore, create_app, load_templates
from gateway._context import host_id
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import run_server, stop_server
from tests.gateway.serve_process import frames

Frames = list[tuple[str, dict[str, Any]]]


@pytest.fixture
def served_host(tmp_path: Path) -> Iterator[AgentHost]:
    """The host ``slow_server`` serves."""
    with AgentHost(data_dir=tmp_path, call_timeout=30) as host:
        yield host


@pytest.fixture
def slow_server(tmp_path: Path, served_host: AgentHost) -> Iterator[tuple[str, str]]:
    """A served host with template ``slow`` (turns of about a second); (url, key)."""
    keys = KeyStore(tmp_path)
    host = served_host
    templates = load_templates(["slow=tests.gateway.agents:make_slower"])
    url, server, thread = run_server(create_app(AsyncAgentHost(host), templates, keys))
    try:
        key = keys.create("acme").key
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
            made = c.post("/v1/sessions", json={"template": "slow", "session_id": "s"})
            assert made.status_code == 201, made.text
        yield url, key
    finally:
        stop_server(server, thread)
        keys.close()


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _wait_turn_started(url: str, key: str, text: str, started: threading.Event) -> None:
    with _client(url, key) as c, c.stream("GET", "/v1/sessions/s/events") as r:
        for kind, data in frames(r.iter_lines()):
            if kind == "turn_started" and data["text"] == text:
                started.set()
                return


def _streamed(url: str, key: str, text: str, submitted: threading.Event | None = None) -> Frames:
    with _client(url, key) as c:
        body = {"text": text, "stream": True}
        with c.stream("POST", "/v1/sessions/s/messages", json=body) as r:
            assert r.status_code == 200
            if submitted is not None:
                submitted.set()  # the headers came: the send is submitted
            return list(frames(r.iter_lines()))


def _own_turn(got: Frames, text: str) -> int:
    """Assert ``got`` is exactly one turn of ``text`` then its answer; its turn number."""
    starts = [d for k, d in got if k == "turn_started"]
    assert [s["text"] for s in starts] == [text], got
    assert "".join(d["text"] for k, d in got if k == "delta") == f"echo: {text}"
    assert [k for k, _ in got].count("turn_finished") == 1
    assert got[-1] == ("answer", {"message": {"role": "assistant", "content": f"echo: {text}"}})
    turn: int = starts[0]["turn"]
    return turn


def test_a_stream_omits_the_turn_queued_before_it(slow_server: tuple[str, str]) -> None:
    url, key = slow_server
    started = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        watcher = pool.submit(_wait_turn_started, url, key, "first", started)

        def send_first() -> httpx.Response:
            with _client(url, key) as c:
                return c.post("/v1/sessions/s/messages", json={"text": "first"})

        first: Future[httpx.Response] = pool.submit(send_first)
        assert started.wait(30)
        got = _streamed(url, key, "second")  # submitted while "first" runs
        assert first.result(30).json()["message"]["content"] == "echo: first"
        watcher.result(30)
    assert first.done()
    _own_turn(got, "second")


def test_streams_of_the_same_text_each_get_their_own_turn(slow_server: tuple[str, str]) -> None:
    url, key = slow_server
    started = threading.Event()
    submitted = [threading.Event(), threading.Event()]
    with ThreadPoolExecutor(4) as pool:
        watcher = pool.submit(_wait_turn_started, url, key, "block", started)
        block = pool.submit(_streamed, url, key, "block")
        assert started.wait(30)
        one = pool.submit(_streamed, url, key, "same", submitted[0])
        assert submitted[0].wait(30)
        two = pool.submit(_streamed, url, key, "same", submitted[1])
        turns = {_own_turn(one.result(60), "same"), _own_turn(two.result(60), "same")}
        _own_turn(block.result(60), "block")
        watcher.result(30)
    assert len(turns) == 2


def test_a_stream_omits_a_turn_of_the_same_text_queued_before_it(
    slow_server: tuple[str, str], served_host: AgentHost
) -> None:
    url, key = slow_server
    started = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        watcher = pool.submit(_wait_turn_started, url, key, "block", started)
        block = pool.submit(_streamed, url, key, "block")
        assert started.wait(30)
        # the same text, queued by a library call on the same host before the stream
        first = served_host.futures.send(host_id("acme", "s"), "same", tenant_id="acme")
        got = _streamed(url, key, "same")
        assert first.result(60).content == "echo: same"
        block_turn = _own_turn(block.result(60), "block")
        watcher.result(30)
    assert _own_turn(got, "same") == block_turn + 2
