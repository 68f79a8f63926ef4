"""SessionStore: the seed's API, validation, API-key hygiene, eviction order, concurrency."""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from pathlib import Path
from typing import Any

import pykka
import pytest

from supervisor import (
    NORMAL,
    Down,
    ExitReason,
    SessionAlreadyExists,
    SessionEntry,
    SessionNotFound,
    SessionStore,
    monitor,
    terminate,
)
from tests.supervisor.helpers import WAIT, Downs, Worker, crash


class Evictions:
    """An on_evict callback recording (session id, reason, thread name)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.items: list[tuple[str, ExitReason]] = []

    def __call__(self, entry: SessionEntry, reason: ExitReason) -> None:
        with self._cond:
            self.items.append((entry.session_id, reason))
            self._cond.notify_all()

    def wait(self, count: int = 1) -> list[tuple[str, ExitReason]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.items) >= count, WAIT)
            return list(self.items)


def test_create_get_list_count_delete() -> None:
    store = SessionStore(clock_ms=lambda: 1234)
    ref = Worker.start()
    entry = store.create("s1", ref, model="echo", tenant_id="acme")
    assert store.get("s1") is entry
    assert entry.created_at == 1234
    assert entry.tenant_id == "acme"
    assert entry.model == "echo"
    assert store.list() == [entry]
    assert store.count() == 1
    with pytest.raises(SessionAlreadyExists):
        store.create("s1", Worker.start())
    store.delete("s1")
    store.delete("s1")  # idempotent
    with pytest.raises(SessionNotFound):
        store.get("s1")
    assert store.list() == []
    assert store.count() == 0
    assert ref.is_alive()  # deleting an entry does not stop the actor


def test_defaults_follow_the_seed() -> None:
    store = SessionStore()
    entry = store.create("s", Worker.start())
    assert entry.tenant_id == "default"
    assert entry.event_buffer_size == 1000
    assert entry.api_key_fingerprint is None
    assert (entry.blueprint, entry.model, entry.working_dir, entry.group_id) == (None,) * 4
    assert (entry.hibernate_after_ms, entry.max_steering_queue) == (None, None)
    assert entry.plugins == ()
    assert entry.monitor_ref.actor_ref is entry.actor_ref


def test_all_seed_attributes_are_kept_and_frozen(tmp_path: Path) -> None:
    store = SessionStore()
    entry = store.create(
        "s",
        Worker.start(),
        api_key="sk-1",
        tenant_id="t",
        blueprint="coder",
        model="registry:default:echo:echo-1",
        working_dir=tmp_path,
        group_id="g",
        event_buffer_size=0,
        hibernate_after_ms=30_000,
        max_steering_queue=8,
        plugins=["memory", ("search", {"k": 3})],
    )
    assert entry.working_dir == str(tmp_path)
    assert entry.plugins[0] == "memory"
    plugin = entry.plugins[1]
    assert isinstance(plugin, tuple)
    name, options = plugin
    assert (name, dict(options)) == ("search", {"k": 3})
    with pytest.raises(TypeError):
        options["k"] = 4  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.model = "other"  # type: ignore[misc]


def test_unknown_attributes_are_rejected_by_name() -> None:
    store = SessionStore()
    with pytest.raises(TypeError, match=r"'colour'.*allowed: api_key"):
        store.create("s", Worker.start(), colour="blue")  # type: ignore[call-arg]
    assert store.count() == 0


@pytest.mark.parametrize(
    ("attrs", "error", "match"),
    [
        ({"tenant_id": ""}, ValueError, "tenant_id"),
        ({"tenant_id": None}, TypeError, "tenant_id"),
        ({"api_key": 42}, TypeError, "api_key"),
        ({"model": ""}, ValueError, "model"),
        ({"event_buffer_size": -1}, ValueError, "event_buffer_size must be >= 0"),
        ({"event_buffer_size": True}, TypeError, "event_buffer_size"),
        ({"hibernate_after_ms": 0}, ValueError, "hibernate_after_ms must be >= 1"),
        ({"max_steering_queue": 0}, ValueError, "max_steering_queue must be >= 1"),
        ({"max_steering_queue": 2.5}, TypeError, "max_steering_queue"),
        ({"plugins": "memory"}, TypeError, "plugins"),
        ({"plugins": [("x", 1)]}, TypeError, "plugin"),
        ({"working_dir": 3}, TypeError, "working_dir"),
    ],
)
def test_values_are_validated(attrs: dict[str, Any], error: type, match: str) -> None:
    store = SessionStore()
    with pytest.raises(error, match=match):
        store.create("s", Worker.start(), **attrs)
    assert store.count() == 0


def test_session_id_and_actor_are_validated() -> None:
    store = SessionStore()
    with pytest.raises(ValueError, match="session_id"):
        store.create("", Worker.start())
    with pytest.raises(TypeError, match="session_id"):
        store.create(7, Worker.start())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SupervisedActor"):
        store.create("s", pykka.ThreadingActor.start())
    dead = Worker.start()
    dead.stop()
    with pytest.raises(pykka.ActorDeadError):
        store.create("s", dead)
    assert terminate(dead, WAIT)
    with pytest.raises(pykka.ActorDeadError):
        store.create("s", dead)
    assert store.count() == 0


def test_raw_api_key_is_never_stored_or_returned() -> None:
    raw = "sk-live-very-secret-0123456789"
    store = SessionStore()
    entry = store.create("s", Worker.start(), api_key=raw)
    for field in dataclasses.fields(entry):
        assert raw not in str(getattr(entry, field.name))
    assert raw not in repr(entry)
    assert raw not in repr(vars(store))
    assert entry.api_key_fingerprint == store.fingerprint(raw)
    assert store.api_key_matches("s", raw)
    assert not store.api_key_matches("s", "sk-other")
    assert store.list_by_api_key(raw) == [entry]
    assert store.list_by_api_key("sk-other") == []


def test_reregister_with_a_stored_fingerprint() -> None:
    raw = "sk-live-0123"
    store = SessionStore()
    entry = store.create("s", Worker.start(), api_key_fingerprint=store.fingerprint(raw))
    assert store.api_key_matches("s", raw)
    assert store.list_by_api_key(raw) == [entry]
    with pytest.raises(TypeError, match="not both"):
        store.create("t", Worker.start(), api_key=raw, api_key_fingerprint=store.fingerprint(raw))


def test_fingerprints_are_keyed_per_store() -> None:
    a, b = SessionStore(), SessionStore()
    assert a.fingerprint("k") != b.fingerprint("k")
    same = bytes(range(32))
    assert SessionStore(secret=same).fingerprint("k") == SessionStore(secret=same).fingerprint("k")
    with pytest.raises(ValueError, match="16 bytes"):
        SessionStore(secret=b"short")
    with pytest.raises(TypeError, match="bytes"):
        SessionStore(secret="text" * 8)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_evict"):
        SessionStore(on_evict=3)  # type: ignore[arg-type]


def test_api_key_matches_is_false_for_a_session_without_key() -> None:
    store = SessionStore()
    store.create("s", Worker.start())
    assert not store.api_key_matches("s", "")


def test_queries_by_tenant_and_api_key() -> None:
    store = SessionStore()
    e1 = store.create("1", Worker.start(), tenant_id="a", api_key="k1")
    e2 = store.create("2", Worker.start(), tenant_id="b", api_key="k1")
    e3 = store.create("3", Worker.start(), tenant_id="a", api_key="k2")
    assert store.list_by_tenant("a") == [e1, e3]
    assert store.list_by_tenant("b") == [e2]
    assert store.list_by_tenant("zzz") == []
    assert store.list_by_api_key("k1") == [e1, e2]
    assert store.list_by_api_key("k2") == [e3]
    store.delete("1")
    assert store.list_by_tenant("a") == [e3]
    assert store.list_by_api_key("k1") == [e2]
    store._check_consistency()


@pytest.mark.parametrize("how", ["crash", "stop", "system_exit"])
def test_dead_actor_is_evicted_before_watchers_see_down(how: str) -> None:
    evictions = Evictions()
    store = SessionStore(on_evict=evictions)
    ref = Worker.start()
    store.create("s", ref, tenant_id="t", api_key="k")
    seen_on_down: list[object] = []

    def watcher(down: Down) -> None:  # an ordinary watcher, e.g. a supervisor or host
        try:
            seen_on_down.append(store.get("s"))
        except SessionNotFound as exc:
            seen_on_down.append(exc)
        seen_on_down.append(list(evictions.items))

    downs = Downs()
    monitor(ref, watcher)
    monitor(ref, downs)
    if how == "crash":
        crash(ref)
    elif how == "stop":
        ref.stop()
    else:
        crash(ref, SystemExit(0))
    [down] = downs.wait()
    not_found, evicted_before = seen_on_down
    assert isinstance(not_found, SessionNotFound)
    assert evicted_before == [("s", down.reason)]
    assert store.count() == 0
    assert store.list_by_tenant("t") == []
    assert store.list_by_api_key("k") == []
    store._check_consistency()


def test_lookups_never_return_a_dying_actor() -> None:
    evictions = Evictions()
    store = SessionStore(on_evict=evictions)
    ref = Worker.start()
    entered, release = threading.Event(), threading.Event()

    def hold(_down: Down) -> None:  # early watcher added before the store's: holds its turn
        entered.set()
        release.wait(WAIT)

    monitor(ref, hold, early=True)
    store.create("s", ref, tenant_id="t", api_key="k")
    store.create("s2", ref, tenant_id="t")  # the same actor under a second id
    boom = RuntimeError("died")
    crash(ref, boom)
    assert entered.wait(WAIT)  # dead, but its eviction has not run yet
    with pytest.raises(SessionNotFound):
        store.get("s")
    assert store.list() == []
    assert store.list_by_tenant("t") == []
    assert store.list_by_api_key("k") == []
    assert store.count() == 0  # the lookups above evicted on the spot
    store._check_consistency()
    new = store.create("s", Worker.start())  # the id is free again
    release.set()
    assert sorted(evictions.wait(2)) == [("s", boom), ("s2", boom)]  # once each, real reason
    assert store.get("s") is new  # the old Down did not evict the new entry
    assert terminate(ref, WAIT)
    assert len(evictions.items) == 2


def test_create_replaces_an_entry_whose_actor_died_unnoticed() -> None:
    store = SessionStore()
    ref = Worker.start()
    entered, release = threading.Event(), threading.Event()

    def hold(_down: Down) -> None:
        entered.set()
        release.wait(WAIT)

    monitor(ref, hold, early=True)
    store.create("s", ref)
    ref.stop()
    assert entered.wait(WAIT)
    new = store.create("s", Worker.start())
    release.set()
    assert terminate(ref, WAIT)
    assert store.get("s") is new


def test_delete_cancels_the_monitor_and_the_eviction_callback() -> None:
    evictions = Evictions()
    store = SessionStore(on_evict=evictions)
    ref = Worker.start()
    store.create("s", ref)
    store.delete("s")
    downs = Downs()
    monitor(ref, downs)
    crash(ref)
    downs.wait()
    assert evictions.items == []


def test_on_evict_raising_is_logged_and_the_entry_still_goes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def bad(_entry: SessionEntry, _reason: ExitReason) -> None:
        raise RuntimeError("host bug")

    store = SessionStore(on_evict=bad)
    ref = Worker.start()
    store.create("s", ref)
    with caplog.at_level(logging.ERROR, logger="supervisor"):
        ref.stop()
        assert terminate(ref, WAIT)
    assert "host bug" in caplog.text
    assert store.count() == 0


def test_eviction_reason_is_normal_on_stop() -> None:
    evictions = Evictions()
    store = SessionStore(on_evict=evictions)
    ref = Worker.start()
    store.create("s", ref)
    ref.stop()
    assert evictions.wait() == [("s", NORMAL)]


def test_concurrent_create_query_kill_delete() -> None:
    evictions = Evictions()
    store = SessionStore(on_evict=evictions)
    errors: list[BaseException] = []
    threads_n, rounds = 8, 40
    start = threading.Barrier(threads_n)
    killed: list[str] = []
    killed_lock = threading.Lock()

    def worker(t: int) -> None:
        rng = random.Random(t)
        try:
            start.wait(WAIT)
            for i in range(rounds):
                sid = f"{t}-{i}"
                ref = Worker.start()
                tenant = f"tenant-{rng.randrange(3)}"
                store.create(sid, ref, tenant_id=tenant, api_key=f"key-{rng.randrange(3)}")
                assert store.get(sid).actor_ref is ref
                assert sid in {e.session_id for e in store.list_by_tenant(tenant)}
                assert sid in {e.session_id for e in store.list()}
                action = rng.randrange(3)
                if action == 0:
                    ref.stop(timeout=WAIT)  # returns once the actor is stopped
                    with pytest.raises(SessionNotFound):
                        store.get(sid)  # never a dead ref, evicted yet or not
                    with killed_lock:
                        killed.append(sid)
                elif action == 1:
                    store.delete(sid)
                    with pytest.raises(SessionNotFound):
                        store.get(sid)
                    ref.stop(timeout=WAIT)
                else:
                    crash(ref)
                    assert terminate(ref, WAIT)  # Down notices are out
                    with pytest.raises(SessionNotFound):
                        store.get(sid)
                    with killed_lock:
                        killed.append(sid)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(30)
    assert errors == []
    for ref in pykka.ActorRegistry.get_all():
        assert terminate(ref, WAIT)
    assert store.count() == 0
    assert store.list() == []
    store._check_consistency()
    assert sorted(sid for sid, _ in evictions.wait(len(killed))) == sorted(killed)
