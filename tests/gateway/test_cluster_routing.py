"""Gateways of one cluster on a real PostgreSQL: any node answers for any session.

Nodes are real uvicorn servers on 127.0.0.1 (in this process, or ``sessionvisor
serve`` processes for the SIGKILL test); requests for a session another node
owns are forwarded to it over HTTP (``gateway.routing``).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from actors import Snapshot
from cli import main
from gateway._context import host_id
from gateway.routing import EPOCH_HEADER, FORWARDED_HEADER, NODE_HEADER, REFUSED_WAIT
from tests.actors.snapshot_helpers import session_state
from tests.gateway.cluster_nodes import WAIT, Nodes, ServeProcess, created
from tests.gateway.serve_process import frames
from tests.supervisor.cluster_helpers import sql


def _texts(history: httpx.Response) -> list[str]:
    assert history.status_code == 200, history.text
    return [m["content"] for m in history.json()["messages"]]


def _session_with_a_turn(owner: ServeProcess, key: str) -> None:
    """Create session ``s`` on ``owner`` and have it answer ``one``: it owns ``s`` now."""
    with httpx.Client(base_url=owner.url, headers={"Authorization": f"Bearer {key}"}) as a:
        made = a.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
        assert made.status_code == 201, made.text
        answer = a.post("/v1/sessions/s/messages", json={"text": "one"})
        assert answer.status_code == 200, answer.text


def test_any_node_serves_any_session(nodes: Nodes) -> None:
    a, b, c = nodes.start("a"), nodes.start("b"), nodes.start("c")
    key = b.keys.create("acme").key  # made on b, valid on every node
    created(a, key, "s")
    for via, text in ((b, "one"), (c, "two")):
        with via.client(key) as client:
            answer = client.post("/v1/sessions/s/messages", json={"text": text})
        assert answer.status_code == 200, answer.text
        assert answer.json()["message"]["content"] == f"echo: {text}"
        assert answer.headers[NODE_HEADER] == "a"  # forwarded to the owner
    with c.client(key) as client:
        history = client.get("/v1/sessions/s/history")
        assert history.headers[NODE_HEADER] == "a"
        assert _texts(history) == ["one", "echo: one", "two", "echo: two"]
        info = client.get("/v1/sessions/s")
        assert (info.status_code, info.json()["template"]) == (200, "echo")
        missing = client.get("/v1/sessions/nope/history")
        assert missing.status_code == 404
        assert missing.json()["type"] == "/problems/session-not-found"
    with b.client(key) as client:  # a streamed answer is relayed as a stream
        with client.stream(
            "POST", "/v1/sessions/s/messages", json={"text": "three", "stream": True}
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stream.headers[NODE_HEADER] == "a"
            body = "".join(stream.iter_text())
    assert "event: answer" in body
    assert '"content":"echo: three"' in body
    assert b.host.list_sessions() == []
    assert c.host.list_sessions() == []
    with c.client(key) as client:  # the id is taken on another node
        again = client.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
    assert again.status_code == 409
    assert again.json()["type"] == "/problems/session-exists"
    with b.client("sv_not-a-key") as client:  # a bad key is refused where it arrives
        refused = client.post("/v1/sessions/s/messages", json={"text": "x"})
    assert refused.status_code == 401


def test_the_owner_answers_409_to_a_stale_epoch_and_the_forwarder_looks_again(
    nodes: Nodes,
) -> None:
    a, b, c = nodes.start("a"), nodes.start("b"), nodes.start("c")
    key = a.keys.create("acme").key
    created(a, key, "s")
    with b.client(key) as client:  # b caches: owner a, epoch 1
        first = client.post("/v1/sessions/s/messages", json={"text": "one"})
    assert first.headers[NODE_HEADER] == "a"
    a_port = int(a.url.rsplit(":", 1)[1])
    a.stop()  # drained: c takes it over at once, at epoch 2
    with c.client(key) as client:
        moved = client.post("/v1/sessions/s/messages", json={"text": "two"})
    assert (moved.status_code, moved.headers[NODE_HEADER]) == (200, "c")
    again = nodes.start("a", port=a_port)  # a new incarnation at the address b cached
    with httpx.Client(base_url=again.url, timeout=WAIT) as raw:  # what b then hears from it
        stale = raw.post(
            "/v1/sessions/s/messages",
            json={"text": "x"},
            headers={
                "Authorization": f"Bearer {key}",
                FORWARDED_HEADER: "b",
                EPOCH_HEADER: "1",
            },
        )
    assert stale.status_code == 409
    assert stale.json()["type"] == "/problems/stale-epoch"
    assert "believed epoch 1" in stale.json()["detail"]
    with b.client(key) as client:  # 409 from the new a, a look-up, then c answers
        third = client.post("/v1/sessions/s/messages", json={"text": "three"})
    assert (third.status_code, third.headers[NODE_HEADER]) == (200, "c"), third.text
    with again.client(key) as client:
        history = client.get("/v1/sessions/s/history")
    assert _texts(history) == ["one", "echo: one", "two", "echo: two", "three", "echo: three"]
    assert sql(c.host.store, "SELECT owner_node, epoch FROM {s}.sessions") == [("c", 2)]  # type: ignore[arg-type]


def test_a_forwarded_request_is_never_forwarded_again(nodes: Nodes) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    created(a, key, "s")
    with httpx.Client(base_url=b.url, timeout=WAIT) as raw:  # b does not own it
        answer = raw.post(
            "/v1/sessions/s/messages",
            json={"text": "x"},
            headers={"Authorization": f"Bearer {key}", FORWARDED_HEADER: "c", EPOCH_HEADER: "1"},
        )
    assert answer.status_code == 409
    assert answer.json()["detail"].endswith(
        "this node holds no lease on it; look the owner up again"
    )
    assert b.host.list_sessions() == []


def test_a_killed_owner_is_a_retryable_503_then_the_receiving_node_answers(
    pg_dsn: str, pg_schema: str, tmp_path: Path, nodes: Nodes
) -> None:
    ttl = REFUSED_WAIT + 2.0  # the lease outlives a request's wait on the refusing owner
    owner = ServeProcess(pg_dsn, pg_schema, tmp_path, "a", ttl)
    try:
        b = nodes.start("b", ttl=ttl)
        key = b.keys.create("acme").key
        _session_with_a_turn(owner, key)
        owner.kill()
        killed_at = time.monotonic()
        seen: list[httpx.Response] = []
        with b.client(key) as client:
            while time.monotonic() - killed_at < WAIT:
                answer = client.post("/v1/sessions/s/messages", json={"text": "two"})
                seen.append(answer)
                if answer.status_code != 503:
                    break
                time.sleep(float(answer.headers["Retry-After"]))  # as a client is told to
        first, last = seen[0], seen[-1]
        assert first.status_code == 503, first.text  # the lease is still fresh: no claim yet
        assert first.elapsed.total_seconds() >= REFUSED_WAIT * 0.9  # asked again meanwhile
        assert first.json()["retryable"] is True
        assert first.headers["Retry-After"] == "1"
        assert (last.status_code, last.headers[NODE_HEADER]) == (200, "b"), last.text
        assert time.monotonic() - killed_at >= ttl * 0.5  # not before the lease could lapse
        with b.client(key) as client:
            history = client.get("/v1/sessions/s/history")
        assert _texts(history) == ["one", "echo: one", "two", "echo: two"]
    finally:
        owner.close()


def test_a_race_to_resume_through_two_gateways_has_one_winner_and_the_loser_forwards(
    nodes: Nodes,
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    rounds = 200  # as issue 17 asks
    store = a.host.store
    for index in range(rounds):  # sessions whose node never claimed them in this cluster
        internal = f"acme/r{index}"
        a.keys.remember_session(internal, "acme", "echo", "{}")
        state = session_state(1, session_id=internal)
        state["metadata"] = {"tenant_id": "acme"}
        store.save(Snapshot.new(session_id=internal, state=state))
    barrier = threading.Barrier(2)
    served: dict[str, list[tuple[int, str, str]]] = {"a": [], "b": []}

    def race(name: str) -> None:
        node = a if name == "a" else b
        with node.client(key) as client:
            for index in range(rounds):
                barrier.wait(WAIT)
                answer = client.post(f"/v1/sessions/r{index}/messages", json={"text": name})
                served[name].append(
                    (answer.status_code, answer.headers.get(NODE_HEADER, ""), answer.text)
                )

    threads = [threading.Thread(target=race, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 10)  # 200 rounds on a loaded machine
    owners = dict(sql(store, "SELECT session_id, owner_node FROM {s}.sessions"))  # type: ignore[arg-type]
    epochs = {epoch for (epoch,) in sql(store, "SELECT epoch FROM {s}.sessions")}  # type: ignore[arg-type]
    assert epochs == {1}  # one claim per session: nobody took one from the other
    for index in range(rounds):
        got_a, got_b = served["a"][index], served["b"][index]
        assert got_a[0] == got_b[0] == 200, (got_a, got_b)
        winner = owners[f"acme/r{index}"]
        assert got_a[1] == got_b[1] == winner  # the loser forwarded to the winner
    winners = set(owners.values())
    assert len(owners) == rounds
    assert winners <= {"a", "b"}
    with a.client(key) as client:
        texts = sorted(_texts(client.get("/v1/sessions/r0/history"))[-4:])
    assert texts == ["a", "b", "echo: a", "echo: b"]


def test_sigterm_drains_a_serve_node_and_its_sessions_move_without_the_ttl(
    pg_dsn: str, pg_schema: str, tmp_path: Path, nodes: Nodes
) -> None:
    ttl = 60.0  # far longer than the test: only the drain can free the session
    owner = ServeProcess(pg_dsn, pg_schema, tmp_path, "a", ttl)
    try:
        b = nodes.start("b", ttl=ttl)
        key = b.keys.create("acme").key
        _session_with_a_turn(owner, key)
        owner.process.terminate()
        assert owner.process.wait(WAIT) == 0  # it shut down: final checkpoints, then the drain
        rows = sql(b.host.store, "SELECT owner_node, state FROM {s}.sessions")  # type: ignore[arg-type]
        assert rows in ([(None, "active")], [("b", "active")])  # released (b may have swept it)
        with b.client(key) as client:
            answer = client.post("/v1/sessions/s/messages", json={"text": "two"})
            assert (answer.status_code, answer.headers[NODE_HEADER]) == (200, "b"), answer.text
            history = client.get("/v1/sessions/s/history")
        assert _texts(history) == ["one", "echo: one", "two", "echo: two"]
    finally:
        owner.close()


def test_a_frozen_owner_ends_the_forwarded_wait_with_a_503_then_the_session_moves(
    pg_dsn: str, pg_schema: str, tmp_path: Path, nodes: Nodes
) -> None:
    ttl = 1.5
    owner = ServeProcess(pg_dsn, pg_schema, tmp_path, "a", ttl)
    try:
        b = nodes.start("b", ttl=ttl)
        key = b.keys.create("acme").key
        _session_with_a_turn(owner, key)
        owner.process.send_signal(signal.SIGSTOP)  # it accepts connections, answers nothing
        try:
            frozen_at = time.monotonic()
            with b.client(key) as client:
                waited = client.post("/v1/sessions/s/messages", json={"text": "two"})
            assert waited.status_code == 503, waited.text  # its lease lapsed: no hang
            assert waited.json()["type"] == "/problems/owner-unavailable"
            assert waited.headers["Retry-After"] == "1"
            assert time.monotonic() - frozen_at < ttl + 3 * b.host.node.config.heartbeat_interval  # type: ignore[union-attr]
            with b.client(key) as client:  # sent again, as told: b takes it over
                moved = client.post("/v1/sessions/s/messages", json={"text": "two"})
                assert (moved.status_code, moved.headers[NODE_HEADER]) == (200, "b"), moved.text
                history = client.get("/v1/sessions/s/history")
            assert _texts(history) == ["one", "echo: one", "two", "echo: two"]
        finally:
            owner.process.send_signal(signal.SIGCONT)
    finally:
        owner.close()


def test_keys_commands_act_on_every_node_of_the_cluster(
    nodes: Nodes, pg_dsn: str, pg_schema: str
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    where = ["--data-dir", str(nodes.data_dir), "--postgres", pg_dsn]
    where += ["--postgres-schema", pg_schema]
    runner = CliRunner()
    made = runner.invoke(main, ["keys", "create", *where, "--tenant", "acme", "--json"])
    assert made.exit_code == 0, made.output
    new = json.loads(made.stdout)
    for node in (a, b):
        with node.client(new["key"]) as client:
            assert client.get("/v1/sessions").status_code == 200
    listed = runner.invoke(main, ["keys", "list", *where, "--json"])
    assert [row["key_id"] for row in json.loads(listed.stdout)] == [new["key_id"]]
    revoked = runner.invoke(main, ["keys", "revoke", *where, new["key_id"]])
    assert revoked.exit_code == 0, revoked.output
    for node in (a, b):  # at once, everywhere
        with node.client(new["key"]) as client:
            assert client.get("/v1/sessions").status_code == 401
    missing = runner.invoke(main, ["keys", "revoke", *where, "key_nope"])
    assert missing.exit_code == 1
    assert "no API key with id 'key_nope'" in missing.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node-id", "a"], "--node-id and --advertise need --postgres"),
        (["--postgres", "dbname=x"], "--postgres (cluster mode) needs --node-id"),
        (
            ["--postgres", "dbname=x", "--node-id", "a", "--advertise", "10.0.0.5:8080"],
            "advertise must be the gateway's URL",
        ),
    ],
)
def test_serve_refuses_incomplete_cluster_options(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "serve",
            "--data-dir",
            str(tmp_path),
            "--template",
            "echo=tests.gateway.agents:echo",
            *args,
        ],
        env={"SESSIONVISOR_POSTGRES": None},
    )
    assert result.exit_code == 2
    assert message in result.output


def test_a_forwarded_event_stream_ends_with_an_error_frame_when_the_owner_dies(
    pg_dsn: str, pg_schema: str, tmp_path: Path, nodes: Nodes
) -> None:
    owner = ServeProcess(pg_dsn, pg_schema, tmp_path, "a", 30.0)
    try:
        b = nodes.start("b")
        key = b.keys.create("acme").key
        _session_with_a_turn(owner, key)
        with (
            b.client(key) as client,
            client.stream("GET", "/v1/sessions/s/events", params={"since": "0"}) as stream,
        ):
            assert stream.headers[NODE_HEADER] == "a"
            lines = stream.iter_lines()
            seen = []
            for line in lines:  # the buffered events come through the relay at once
                seen.append(line)
                if line == "event: turn_finished":
                    break
            owner.kill()
            rest = list(lines)  # ends: no hang once the owner is gone
        assert "event: turn_started" in seen
        assert "event: error" in rest
        error = json.loads(rest[rest.index("event: error") + 1].removeprefix("data: "))
        assert (error["status"], error["type"]) == (503, "/problems/owner-unavailable")
    finally:
        owner.close()


def test_a_request_arriving_while_the_owner_drains_is_served_by_the_next_owner(
    nodes: Nodes,
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    created(a, key, "s")
    refused = threading.Event()
    about: list[object] = []

    class Refusals(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "refused the connection" in record.getMessage():
                about.append(getattr(record, "session_id", None))  # the line's stable field
                refused.set()

    handler = Refusals(logging.INFO)
    routing_log = logging.getLogger("gateway.routing")
    routing_log.addHandler(handler)
    level = routing_log.level
    routing_log.setLevel(logging.INFO)
    try:
        a.stop_serving()  # its socket is closed; it still holds the lease, as when draining
        with ThreadPoolExecutor(1) as pool, b.client(key) as client:
            answer = pool.submit(client.post, "/v1/sessions/s/messages", json={"text": "two"})
            assert refused.wait(WAIT)  # b was refused and is asking again
            a.stop()  # the drain releases the session
            got = answer.result(WAIT)
    finally:
        routing_log.removeHandler(handler)
        routing_log.setLevel(level)
    assert (got.status_code, got.headers[NODE_HEADER]) == (200, "b"), got.text
    assert about[0] == host_id("acme", "s")
    assert got.json()["message"]["content"] == "echo: two"


def test_sigterm_ends_the_event_streams_a_node_relays_cleanly_and_at_once(
    pg_dsn: str, pg_schema: str, tmp_path: Path, nodes: Nodes
) -> None:
    """A node relaying another node's ``/events`` (the session is owned elsewhere) ends that
    stream cleanly when told to stop, as it ends its own: it does not hold its stop up
    for the graceful timeout (5 s) and then cut the relayed stream off mid-body."""
    ttl = 60.0  # the owner keeps the session throughout
    a = nodes.start("a", ttl=ttl)
    key = a.keys.create("acme").key
    created(a, key, "s")
    with a.client(key) as client:
        assert client.post("/v1/sessions/s/messages", json={"text": "one"}).status_code == 200
    relay = ServeProcess(pg_dsn, pg_schema, tmp_path, "b", ttl)
    seen: list[str] = []
    ended: list[BaseException | None] = []
    caught_up = threading.Event()

    def follow() -> None:
        headers = {"Authorization": f"Bearer {key}"}
        try:
            with (
                httpx.Client(base_url=relay.url, headers=headers, timeout=30) as client,
                client.stream("GET", "/v1/sessions/s/events", params={"since": "0"}) as stream,
            ):
                assert stream.headers[NODE_HEADER] == "a"  # relayed from the owner
                for kind, _ in frames(stream.iter_lines()):
                    seen.append(kind)
                    if kind == "turn_finished":
                        caught_up.set()
            ended.append(None)
        except Exception as exc:  # what the client saw, asserted below
            ended.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        assert caught_up.wait(WAIT)
        started = time.monotonic()
        relay.process.send_signal(signal.SIGTERM)
        assert relay.process.wait(WAIT) == 0
        took = time.monotonic() - started
        follower.join(WAIT)
    finally:
        relay.close()
    assert ended == [None]  # the body ended, not broken off
    assert "error" not in seen  # no owner-unavailable frame: the owner is fine
    assert seen[:1] == ["turn_started"]
    assert took < 3, f"the stop took {took:.1f} s"
