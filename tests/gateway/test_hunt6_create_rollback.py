"""A create whose first checkpoint fails (the store busy, full, unavailable) answers a
retryable 503 and leaves nothing behind: the session ran on, recorded, so the client's
retry of the same id got 409 ``session-exists``, and one of a random id held a place of
the tenant's limit. ``AgentHost.stop_session(checkpoint=False)`` is what undoes it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import AgentTemplate, Snapshot
from gateway import Limits
from supervisor import (
    AgentHost,
    MemoryCheckpointStore,
    SessionNotFound,
    StoreBusy,
    StoreFull,
    StoreUnavailable,
)
from tests.gateway.conftest import Served, serving
from tests.gateway.test_gateway import problem


class FailingSaves(MemoryCheckpointStore):
    """A memory store whose next ``save`` raises ``failure`` (then saves work again)."""

    failure: BaseException | None = None

    def save(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> Any:
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure
        return super().save(snapshot, *args, **kwargs)


@pytest.fixture
def store() -> FailingSaves:
    return FailingSaves()


@pytest.fixture
def one_place(tmp_path: Path, store: FailingSaves) -> Iterator[Served]:
    """A served host on ``store`` whose tenants may have one session each."""
    host = AgentHost(store=store, call_timeout=10)
    templates = {"echo": AgentTemplate(model="echo")}
    with serving(host, templates, tmp_path, Limits(max_sessions_per_tenant=1)) as made:
        yield made


FAILURES = [
    StoreBusy("db", "saving a checkpoint", TimeoutError("lock wait")),
    StoreFull("db", sqlite3.OperationalError("database or disk is full")),
    StoreUnavailable("/data/checkpoints.db", PermissionError("read-only")),
]


@pytest.mark.parametrize("failure", FAILURES, ids=lambda f: type(f).__name__)
def test_a_create_whose_checkpoint_fails_leaves_nothing_and_a_retry_succeeds(
    one_place: Served, store: FailingSaves, failure: BaseException
) -> None:
    key = one_place.keys.create("acme").key
    with one_place.client(key) as client:
        store.failure = failure
        failed = client.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
        assert problem(failed, 503, failed.json()["type"].rpartition("/")[2])["retryable"]
        assert failed.headers["Retry-After"] == "1"
        assert one_place.host.list_sessions("acme") == []  # not left running
        assert one_place.keys.session_row("acme/s") is None  # nor recorded
        assert store.list("acme/s") == []
        assert client.get("/v1/sessions").json()["sessions"] == []
        retried = client.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
        assert retried.status_code == 201, retried.text  # was 409 session-exists
        assert client.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success


def test_a_failed_create_of_a_random_id_holds_no_place_of_the_limit(
    one_place: Served, store: FailingSaves
) -> None:
    key = one_place.keys.create("acme").key
    with one_place.client(key) as client:
        store.failure = FAILURES[0]
        assert client.post("/v1/sessions", json={"template": "echo"}).status_code == 503
        made = client.post("/v1/sessions", json={"template": "echo"})
        assert made.status_code == 201, made.text  # was 409 session-limit: a ghost's place
        listed = client.get("/v1/sessions").json()["sessions"]
        assert [s["session_id"] for s in listed] == [made.json()["session_id"]]


def test_stop_session_without_a_checkpoint_saves_none_and_forgets_the_session(
    store: FailingSaves,
) -> None:
    with AgentHost(store=store, call_timeout=10) as host:
        host.start_session(AgentTemplate(model="echo"), "s", tenant_id="acme")
        host.send("s", "hi")  # one checkpoint, of the turn
        saved = [i.checkpoint_id for i in store.list("s")]
        store.failure = StoreBusy("db", "saving", TimeoutError())  # a final one would fail
        host.stop_session("s", tenant_id="acme", checkpoint=False)
        assert store.failure is not None  # no save was tried
        assert [i.checkpoint_id for i in store.list("s")] == saved
        assert host.list_sessions() == []
        with pytest.raises(SessionNotFound):
            host.session_info("s")
        host.resume("s", AgentTemplate(model="echo"))  # from the checkpoint that stands
        assert [m.content for m in host.history("s")] == ["hi", "echo: hi"]
        with pytest.raises(TypeError, match="checkpoint must be True or False, not 'no'"):
            host.stop_session("s", checkpoint="no")  # type: ignore[arg-type]
        assert host.session_info("s").status == "active"  # refused before stopping it
