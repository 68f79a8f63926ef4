"""The contract every CheckpointStore backend must pass, as a base class of tests.

A backend's test module subclasses ``CheckpointStoreContract`` and defines the
``make_store`` fixture (a factory taking the store's keyword arguments, whose
stores it closes after the test); every test here then runs against it.
``test_checkpoint_store_contract.py`` runs it on the memory and SQLite stores,
``test_postgres_store.py`` on PostgreSQL.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from actors import Message, Snapshot, SnapshotEncodeError, redact_secrets
from supervisor import (
    CheckpointInfo,
    CheckpointNotFound,
    CheckpointStore,
    SnapshotTooLarge,
)
from tests.actors.snapshot_helpers import session_state

__all__ = ["CheckpointStoreContract", "MakeStore", "snap"]

MakeStore = Callable[..., CheckpointStore]


def snap(session_id: str = "sess-1", turns: int = 2, **kwargs: Any) -> Snapshot:
    return Snapshot.new(
        session_id=session_id, state=session_state(turns, session_id=session_id), **kwargs
    )


class CheckpointStoreContract:
    """The contract's tests; subclasses provide the ``make_store`` fixture."""

    @pytest.fixture
    def store(self, make_store: MakeStore) -> CheckpointStore:
        return make_store()

    def test_implements_the_protocol(self, store: CheckpointStore) -> None:
        assert isinstance(store, CheckpointStore)

    def test_save_then_load_returns_an_equal_snapshot(self, store: CheckpointStore) -> None:
        saved = snap(label="first", metadata={"k": [1, 2]})
        info = store.save(saved)
        assert info == CheckpointInfo(
            "sess-1", saved.checkpoint_id, saved.saved_at, "first", len(saved.serialize())
        )
        assert store.load("sess-1") == saved
        assert store.load("sess-1", saved.checkpoint_id) == saved

    def test_checkpoint_times_are_utc_whatever_the_snapshots_zone(
        self, store: CheckpointStore
    ) -> None:
        # CheckpointInfo.saved_at is documented as UTC: a snapshot made with another
        # zone (by hand, or carried over) is listed at the same moment, in UTC.
        local = timezone(timedelta(hours=2))
        moment = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=local)
        saved = dataclasses.replace(snap(), saved_at=moment)
        returned = store.save(saved)
        [listed] = store.list("sess-1")
        for info in (returned, listed):
            assert info.saved_at == moment
            assert info.saved_at.utcoffset() == timedelta(0)
        assert store.load("sess-1") == saved

    def test_load_latest_is_the_greatest_checkpoint_id(self, store: CheckpointStore) -> None:
        older, newer = snap(turns=1), snap(turns=2)
        store.save(newer)
        store.save(older)  # saved last, but made first
        assert store.load("sess-1") == newer

    def test_missing_checkpoints(self, store: CheckpointStore) -> None:
        with pytest.raises(CheckpointNotFound, match="no checkpoint stored for session") as info:
            store.load("nobody")
        assert info.value.session_id == "nobody"
        store.save(snap())
        with pytest.raises(CheckpointNotFound, match="'nope'") as info:
            store.load("sess-1", "nope")
        assert info.value.checkpoint_id == "nope"

    def test_list_is_newest_first_metadata_only(self, store: CheckpointStore) -> None:
        snaps = [snap(turns=t, label=f"t{t}") for t in range(4)]
        for s in snaps:
            store.save(s)
        listed = store.list("sess-1")
        assert [i.checkpoint_id for i in listed] == [s.checkpoint_id for s in reversed(snaps)]
        assert [i.label for i in listed] == ["t3", "t2", "t1", "t0"]
        assert [i.saved_at for i in listed] == [s.saved_at for s in reversed(snaps)]
        assert [i.size for i in listed] == [len(s.serialize()) for s in reversed(snaps)]
        assert store.list("nobody") == []

    def test_ids_with_a_lone_surrogate_are_refused_on_save_and_found_nowhere(
        self, store: CheckpointStore
    ) -> None:
        # Text no store can encode (an undecodable file name's "surrogateescape" form):
        # a save refuses it; a read finds nothing, as for any unknown id (not the
        # driver's UnicodeEncodeError).
        odd = "s\udcff"
        with pytest.raises(SnapshotEncodeError, match="lone surrogate"):
            store.save(snap(odd))
        store.save(snap())
        assert store.list(odd) == []
        with pytest.raises(CheckpointNotFound):
            store.load(odd)
        with pytest.raises(CheckpointNotFound):
            store.load("sess-1", "c\ud800")
        assert store.delete(odd) == 0
        assert store.delete("sess-1", "c\ud800") == 0
        assert store.prune(odd, keep_last=0) == 0
        assert store.sessions() == ["sess-1"]

    def test_sessions(self, store: CheckpointStore) -> None:
        assert store.sessions() == []
        for sid in ("b", "a", "b"):
            store.save(snap(sid))
        assert store.sessions() == ["a", "b"]

    def test_delete_one_or_all(self, store: CheckpointStore) -> None:
        first, second, other = snap(), snap(turns=3), snap("other")
        for s in (first, second, other):
            store.save(s)
        assert store.delete("sess-1", first.checkpoint_id) == 1
        assert store.delete("sess-1", first.checkpoint_id) == 0
        assert [i.checkpoint_id for i in store.list("sess-1")] == [second.checkpoint_id]
        assert store.delete("sess-1") == 1
        assert store.delete("sess-1") == 0
        assert store.sessions() == ["other"]
        assert store.load("other") == other
        with pytest.raises(CheckpointNotFound):
            store.load("sess-1")

    def test_prune_keeps_the_newest(self, store: CheckpointStore) -> None:
        snaps = [snap(turns=t) for t in range(5)]
        for s in snaps:
            store.save(s)
        assert store.prune("sess-1", keep_last=2) == 3
        assert [i.checkpoint_id for i in store.list("sess-1")] == [
            snaps[4].checkpoint_id,
            snaps[3].checkpoint_id,
        ]
        assert store.load("sess-1", snaps[3].checkpoint_id) == snaps[3]
        assert store.prune("sess-1", keep_last=2) == 0
        assert store.prune("sess-1", keep_last=0) == 2
        assert store.sessions() == []
        with pytest.raises(ValueError, match="keep_last must be >= 0"):
            store.prune("sess-1", keep_last=-1)
        with pytest.raises(TypeError, match="keep_last must be an int"):
            store.prune("sess-1", keep_last="2")  # type: ignore[arg-type]

    def test_keep_last_applies_after_each_save(self, make_store: MakeStore) -> None:
        store = make_store(keep_last=3)
        snaps = [snap(turns=t) for t in range(6)]
        for s in snaps:
            store.save(s)
        assert [i.checkpoint_id for i in store.list("sess-1")] == [
            s.checkpoint_id for s in reversed(snaps[3:])
        ]
        for s in snaps[3:]:
            assert store.load("sess-1", s.checkpoint_id) == s

    @pytest.mark.parametrize("keep", [2**31, 2**63, 2**70])
    def test_a_keep_last_beyond_the_databases_integers_keeps_everything(
        self, make_store: MakeStore, keep: int
    ) -> None:
        # Accepted when the store opens, so it must work: as "keep every checkpoint".
        store = make_store(keep_last=keep)
        snaps = [snap(turns=t) for t in range(3)]
        for s in snaps:
            store.save(s)
        assert [i.checkpoint_id for i in store.list("sess-1")] == [
            s.checkpoint_id for s in reversed(snaps)
        ]
        assert store.prune("sess-1", keep_last=keep) == 0
        assert store.load("sess-1") == snaps[-1]

    def test_a_store_that_would_keep_no_checkpoint_is_refused(self, make_store: MakeStore) -> None:
        # every save would prune itself: nothing durable while send says it is
        with pytest.raises(ValueError, match=r"keep_last must be >= 1 \(every save keeps at le"):
            make_store(keep_last=0)
        with pytest.raises(ValueError, match="or None to keep every checkpoint; got -1"):
            make_store(keep_last=-1)

    def test_a_size_limit_that_is_no_byte_count_is_refused(self, make_store: MakeStore) -> None:
        for limit in (True, "10", 10.0):  # True was a limit of 1 byte; "10" a bare TypeError
            with pytest.raises(TypeError, match="max_snapshot_bytes must be an int number of"):
                make_store(max_snapshot_bytes=limit)
        with pytest.raises(ValueError, match="max_snapshot_bytes must be >= 1, got 0"):
            make_store(max_snapshot_bytes=0)

    def test_keep_last_none_keeps_everything(self, make_store: MakeStore) -> None:
        store = make_store(keep_last=None)
        for t in range(120):
            store.save(snap(turns=t % 3))
        assert len(store.list("sess-1")) == 120

    def test_saving_the_same_checkpoint_id_replaces_it(self, store: CheckpointStore) -> None:
        original = snap()
        original.state["provider_state"] = {"api_key": "sk-secret", "cursor": 1}
        store.save(original)
        redacted = original.redact(redact_secrets)
        info = store.save(redacted)
        assert store.load("sess-1") == redacted
        assert store.list("sess-1") == [info]

    def test_every_retained_checkpoint_of_a_growing_conversation_loads_exactly(
        self,
        make_store: MakeStore,
    ) -> None:
        store = make_store(keep_last=None)
        saved = [snap(turns=t, label=str(t)) for t in range(45)]
        for s in saved:
            store.save(s)
        for s in saved:
            assert store.load("sess-1", s.checkpoint_id) == s

    def test_rewritten_and_branched_histories_load_exactly(self, make_store: MakeStore) -> None:
        store = make_store(keep_last=None)
        base = session_state(5)
        saved = [Snapshot.new(session_id="s", state=base)]
        edited = copy.deepcopy(base)
        edited["messages"][1] = Message.user("rewritten").to_dict()
        saved.append(Snapshot.new(session_id="s", state=edited))
        longer = copy.deepcopy(edited)
        longer["messages"].append(Message.user("more").to_dict())
        saved.append(Snapshot.new(session_id="s", state=longer))
        branch = session_state(3)  # resumed from an older point and went elsewhere
        branch["messages"].append(Message.user("other way").to_dict())
        saved.append(Snapshot.new(session_id="s", state=branch))
        shorter = session_state(2)
        saved.append(Snapshot.new(session_id="s", state=shorter))
        for s in saved:
            store.save(s)
        for s in saved:
            assert store.load("s", s.checkpoint_id) == s
        assert store.prune("s", keep_last=1) == 4
        assert store.load("s") == saved[-1]

    @pytest.mark.parametrize(
        "state",
        [{}, {"messages": None}, {"messages": []}, {"messages": "odd"}, {"turns": 3}],
        ids=["empty", "none-messages", "no-messages", "string-messages", "no-message-key"],
    )
    def test_states_without_a_message_list(
        self, store: CheckpointStore, state: dict[str, Any]
    ) -> None:
        saved = Snapshot.new(session_id="s", state=state)
        assert store.save(saved).size == len(saved.serialize())
        assert store.load("s") == saved

    def test_size_guard_refuses_and_stores_nothing(self, make_store: MakeStore) -> None:
        small, big = snap(turns=1), snap(turns=40)
        limit = len(small.serialize())
        store = make_store(max_snapshot_bytes=limit)
        assert store.save(small).size == limit
        with pytest.raises(SnapshotTooLarge, match="nothing was stored") as info:
            store.save(big)
        assert info.value.size == len(big.serialize())
        assert info.value.limit == limit
        assert [i.checkpoint_id for i in store.list("sess-1")] == [small.checkpoint_id]
        assert store.load("sess-1") == small

    def test_non_plain_snapshot_is_refused_and_nothing_stored(self, store: CheckpointStore) -> None:
        bad = snap()
        bad.state["plugins"]["memory"]["callback"] = print
        with pytest.raises(SnapshotEncodeError, match=r"state\.plugins\.memory\.callback"):
            store.save(bad)
        assert store.sessions() == []
        with pytest.raises(TypeError, match="needs a Snapshot"):
            store.save({"session_id": "s"})  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("where", "path"),
        [
            ("plugin", r"state\.plugins\.memory\.by_id\[7\]"),
            ("usage", r"state\.usage\.per_model\[\(1, 2\)\]"),
            ("metadata", r"metadata\.labels\[None\]"),
        ],
    )
    def test_a_dict_key_that_is_not_a_str_is_refused_and_nothing_stored(
        self, store: CheckpointStore, where: str, path: str
    ) -> None:
        bad = snap()
        if where == "plugin":
            bad.state["plugins"]["memory"]["by_id"] = {7: "seven"}
        elif where == "usage":
            bad.state["usage"] = {"per_model": {(1, 2): 3}}
        else:
            bad = bad.with_metadata({"labels": {None: "x"}})
        with pytest.raises(SnapshotEncodeError, match=rf"{path}: dict key .* is not a str"):
            store.save(bad)
        assert store.sessions() == []

    def test_close_is_idempotent_and_final(self, make_store: MakeStore) -> None:
        store = make_store()
        store.save(snap())
        store.close()
        store.close()
        with pytest.raises(ValueError, match="closed"):
            store.load("sess-1")
        with pytest.raises(ValueError, match="closed"):
            store.save(snap())
        for odd in ("a\x00b", "s\udcff"):  # ids a store may know it holds none of
            with pytest.raises(ValueError, match="closed"):
                store.list(odd)
            with pytest.raises(ValueError, match="closed"):
                store.load(odd)
            with pytest.raises(ValueError, match="closed"):
                store.delete(odd)
            with pytest.raises(ValueError, match="closed"):
                store.prune(odd, keep_last=0)

    def test_context_manager_closes(self, make_store: MakeStore) -> None:
        with make_store() as store:  # type: ignore[attr-defined]
            store.save(snap())
        with pytest.raises(ValueError, match="closed"):
            store.sessions()

    def test_concurrent_saves_from_threads(self, make_store: MakeStore) -> None:
        store = make_store(keep_last=None)
        results: dict[int, list[Snapshot]] = {}
        errors: list[BaseException] = []
        go = threading.Event()

        def work(worker: int) -> None:
            go.wait(5)
            try:
                mine = [snap(f"w{worker}" if t % 2 else "shared", turns=t) for t in range(12)]
                for s in mine:
                    store.save(s)
                results[worker] = mine
            except BaseException as exc:  # reported below; a thread must not die silently
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
        for thread in threads:
            thread.start()
        go.set()
        for thread in threads:
            thread.join(30)
        assert errors == []
        for mine in results.values():
            for s in mine:
                assert store.load(s.session_id, s.checkpoint_id) == s
        assert len(store.list("shared")) == 36
