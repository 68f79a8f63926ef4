"""A host process running as one node of a cluster, driven over stdin/stdout by a test.

Run as ``python -m tests.supervisor.cluster_node_worker DSN SCHEMA NODE_ID TTL [EVENTS]``
from the repository root (``EVENTS``: ``NodeConfig.events``, default ``postgres``). It
runs an ``AgentHost`` on a ``PostgresCheckpointStore``
as node ``NODE_ID`` (checkpoint after every turn; orphans taken over on a
template whose model answers after ``MODEL_DELAY`` seconds, so that a signal
lands mid-turn). It reads one JSON request per line and writes JSON lines:

* ``{"id": n, "op": "start", "sids": [...]}``: start those sessions;
* ``{"id": n, "op": "converse", "sids": [...]}``: one thread per session sends
  turns until one fails; each answered turn is printed as ``{"ack": sid,
  "text": ...}`` *after* ``send`` returned (an acknowledged turn), and the
  failure as ``{"nack": sid, "error": <class name>}``;
* ``{"id": n, "op": "send", "sid": ..., "text": ...}``;
* ``{"id": n, "op": "send_all", "sids": [...], "text": ...}``: one turn to each, in parallel;
* ``{"id": n, "op": "history", "sid": ...}``: the user texts of its turns;
* ``{"id": n, "op": "status"}``: ``fenced``, ``leases``, ``sessions`` here;
* ``{"id": n, "op": "events", "sid": ...}``: ``[seq, type]`` of each event its buffer holds;
* ``{"id": n, "op": "answer", "sids": [...], "text": ...}``: one turn to each, in
  parallel; per session ``"ok"``, the owner's node id if another node owns it
  (``SessionOwnedElsewhere``), or the error's class name;
* ``{"id": n, "op": "stop", "sids": [...]}``: stop those sessions here; those it
  stopped (a session that moved to another node meanwhile is left alone);
* ``{"id": n, "op": "quit"}``: shut the host down (drain) and exit.

Each request is answered by ``{"id": n, "ok": true, "value": ...}`` or
``{"id": n, "ok": false, "error": <class name>, "message": ...}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from actors import EchoModel, Message, ModelResponse, Tool
from supervisor import (
    AgentHost,
    NodeFenced,
    OwnershipLost,
    PostgresCheckpointStore,
    SessionNotFound,
    SessionOwnedElsewhere,
)
from supervisor.cluster import NodeConfig
from tests.supervisor.host_helpers import template

__all__ = ["MODEL_DELAY", "SlowEcho"]

MODEL_DELAY = 0.02
"""Seconds each model call takes (a stand-in for a model's latency)."""


class SlowEcho(EchoModel):
    """``EchoModel`` that takes ``MODEL_DELAY`` seconds to answer, like a remote model."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        time.sleep(MODEL_DELAY)
        return super().generate(messages, tools)


class _Out:
    """JSON lines on stdout, one writer at a time, flushed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, **fields: Any) -> None:
        line = json.dumps(fields)
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def _converse(host: AgentHost, node_id: str, sid: str, out: _Out) -> None:
    turn = 0
    while True:
        turn += 1
        text = f"{node_id}:{sid}:{turn}"
        try:
            host.send(sid, text)
        except Exception as exc:
            out(nack=sid, text=text, error=type(exc).__name__, message=str(exc))
            return
        out(ack=sid, text=text)


def _answer(host: AgentHost, sid: str, text: str) -> str:
    try:
        host.send(sid, text)
    except SessionOwnedElsewhere as exc:
        return exc.node
    except Exception as exc:
        return type(exc).__name__
    return "ok"


def _handle(host: AgentHost, node_id: str, request: dict[str, Any], out: _Out) -> Any:
    op = request["op"]
    chosen = template(model=SlowEcho())
    if op == "start":
        return [host.start_session(chosen, sid) for sid in request["sids"]]
    if op == "converse":
        for sid in request["sids"]:
            threading.Thread(target=_converse, args=(host, node_id, sid, out), daemon=True).start()
        return None
    if op == "send":
        return host.send(request["sid"], request["text"]).content
    if op == "send_all":
        with ThreadPoolExecutor(16) as pool:
            texts = [request["text"]] * len(request["sids"])
            return [m.content for m in pool.map(host.send, request["sids"], texts)]
    if op == "history":
        return [m.content for m in host.history(request["sid"]) if m.role == "user"]
    if op == "events":
        return [[e.seq, e.type] for e in host.events(request["sid"]).events]
    if op == "answer":
        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(lambda sid: _answer(host, sid, request["text"]), request["sids"]))
    if op == "stop":
        stopped = []
        for sid in request["sids"]:
            try:
                host.stop_session(sid)
            except (SessionNotFound, SessionOwnedElsewhere, OwnershipLost, NodeFenced):
                continue  # it moved to another node meanwhile (this one was fenced)
            stopped.append(sid)
        return stopped
    if op == "status":
        node = host.node
        assert node is not None
        return {
            "fenced": node.fenced,
            "leases": node.leases(),
            "sessions": sorted(r.session_id for r in host.list_sessions()),
        }
    raise ValueError(f"unknown op {op!r}")


def main(argv: list[str]) -> int:
    dsn, schema, node_id, ttl = argv[0], argv[1], argv[2], float(argv[3])
    out = _Out()
    store = PostgresCheckpointStore(dsn, schema=schema, transaction_timeout=1.0)
    config = NodeConfig(
        node_id=node_id,
        address=f"http://{node_id}",
        ttl=ttl,
        template=template(model=SlowEcho()),
        sweep_interval=ttl / 8,
        events=argv[4] if len(argv) > 4 else "postgres",
    )
    host = AgentHost(store=store, node=config)
    out(ready=node_id)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            host.shutdown()
            store.close()
            out(id=request["id"], ok=True, value=None)
            return 0
        try:
            value = _handle(host, node_id, request, out)
        except Exception as exc:
            out(id=request["id"], ok=False, error=type(exc).__name__, message=str(exc))
        else:
            out(id=request["id"], ok=True, value=value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
