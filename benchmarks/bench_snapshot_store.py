"""Snapshot codec and SQLite checkpoint store (issue 4). Three figures:

1. ``serialize`` + ``deserialize`` of a 300-message snapshot with tool calls,
   against ``msgpack.packb``/``unpackb`` of the equivalent plain dict (goal:
   <= 2x the raw cost, i.e. a rate ratio >= 0.5); JSON on the same dict for
   comparison.
2. ``SQLiteCheckpointStore.save`` against a bare ``sqlite3`` insert of the same
   bytes in WAL mode with the same ``synchronous`` setting (goal: <= 1.5x the
   cost, rate ratio >= 0.67); and p50/p99 of ``load`` latest of a session with
   1,000 checkpoints.
3. Bytes on disk after 1,000 turns checkpointed every turn with default
   settings, divided by the final snapshot's size (goal <= 3, the store
   closed). While it is open the WAL adds up to about 4 MiB (it is checkpointed
   at about 1,000 pages, see ``supervisor._sqlite_schema``), so the open rows
   of a session this small read several times the closed one.
4. The checkpoint step (``save`` + ``load`` latest) of a 300-message session
   with the per-row checksum against the same store with the checksum's
   ``seal``/``verify`` replaced by no-ops (goal: <= 1.1x, issue 13).
5. The same checkpoint step on an encrypted store (AES-256-GCM) against a
   plaintext one, fed the same snapshots (goal: <= 1.5x, issue 13); and
   ``save`` alone, encrypted against plaintext.

Rates are medians of interleaved rounds; ratios are taken in the same run.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack

import supervisor._message_log as message_log_module
from actors import SCHEMA_VERSION, Message, Snapshot, ToolCall, Usage
from actors._ids import new_checkpoint_id
from benchmarks._common import bare_sqlite, interleaved_rates, percentile, print_table
from supervisor import EncryptionKeys, SQLiteCheckpointStore
from supervisor._message_log import LogRef, seal, verify

SAVE_OPS = 40
LOAD_SAMPLES = 200


def turn_messages(turn: int) -> list[dict[str, Any]]:
    """One turn: a question, a tool call, its result and the answer."""
    call = ToolCall(f"call-{turn}", "search", {"query": f"topic {turn}", "limit": 5})
    return [
        Message.user(f"Question {turn}: what do we know about topic {turn}?").to_dict(),
        Message.assistant(None, (call,)).to_dict(),
        Message.tool(call, f"Found {turn % 7 + 1} documents about topic {turn}. " * 3).to_dict(),
        Message.assistant(f"Topic {turn} is covered by several documents. " * 2).to_dict(),
    ]


def conversation(turns: int) -> Iterator[Snapshot]:
    """Snapshots of one growing session, one per turn (built without stripping: plain already)."""
    messages: list[dict[str, Any]] = [Message.system("You are a research assistant.").to_dict()]
    usage = Usage()
    for turn in range(turns):
        messages.extend(turn_messages(turn))
        usage = usage + Usage(400 + turn, 120)
        state = {"session_id": "bench", "messages": list(messages), "usage": usage.to_dict(),
                 "metadata": {"tenant": "acme"}, "model": "registry:default:openai:gpt-4o",
                 "instructions": "You are a research assistant.",
                 "plugins": {"notes": {"count": turn}}, "provider_state": {"cursor": turn},
                 "turns": turn + 1}  # fmt: skip
        yield Snapshot(
            schema_version=SCHEMA_VERSION, checkpoint_id=new_checkpoint_id(), session_id="bench",
            saved_at=datetime.now(UTC), state=state,
        )  # fmt: skip


def codec_figures() -> list[tuple[str, str]]:
    snap = Snapshot.new(session_id="bench", state=list(conversation(75))[-1].state)
    plain = snap.to_dict()
    raw = msgpack.packb(plain, datetime=True)
    json_plain = {**plain, "saved_at": snap.saved_at.isoformat()}
    text = json.dumps(json_plain)

    def ours() -> object:
        return Snapshot.deserialize(snap.serialize())

    def bare() -> object:
        return msgpack.unpackb(msgpack.packb(plain, datetime=True), timestamp=3)

    def as_json() -> object:
        return json.loads(json.dumps(json_plain))

    ours_rate, raw_rate, ratio = interleaved_rates(ours, bare, ops=200)
    json_rate, _, json_ratio = interleaved_rates(as_json, bare, ops=200)
    return [
        ("snapshot messages / bytes", f"{len(snap.state['messages'])} / {len(raw)} B"),
        ("serialize+deserialize", f"{ours_rate:,.0f} /s ({1e6 / ours_rate:,.0f} us)"),
        ("msgpack packb+unpackb", f"{raw_rate:,.0f} /s ({1e6 / raw_rate:,.0f} us)"),
        ("cost vs raw msgpack (goal <= 2x)", f"{1 / ratio:.2f}x"),
        ("json dumps+loads", f"{json_rate:,.0f} /s ({len(text)} chars)"),
        ("json cost vs raw msgpack", f"{1 / json_ratio:.2f}x"),
    ]


def save_figures(directory: Path) -> list[tuple[str, str]]:
    rounds = 7
    needed = (rounds + 1) * (SAVE_OPS + SAVE_OPS // 2) + 4
    stream = list(conversation(75 + needed))[75:]  # every save adds a turn
    payloads = {s.checkpoint_id: s.serialize() for s in stream}
    store = SQLiteCheckpointStore(directory / "store.db")
    bare = bare_sqlite(directory / "bare.db", store.synchronous)
    bare.execute("CREATE TABLE checkpoints (session_id TEXT, checkpoint_id TEXT, data BLOB)")
    snaps = iter(stream)
    # Like with like: each baseline call handles the snapshot the save side handled at the
    # same position of the same round (first in, first out), so both sides see the same sizes.
    saved: deque[Snapshot] = deque()

    def save() -> object:
        snap = next(snaps)
        saved.append(snap)
        return store.save(snap)

    def insert() -> object:
        cid = saved.popleft().checkpoint_id
        return bare.execute("INSERT INTO checkpoints VALUES ('bench', ?, ?)", (cid, payloads[cid]))

    def serialize_insert() -> object:
        snap = saved.popleft()
        return bare.execute(
            "INSERT INTO checkpoints VALUES ('bench', ?, ?)", (snap.checkpoint_id, snap.serialize())
        )

    with closing(bare), store:
        save_rate, bare_rate, ratio = interleaved_rates(save, insert, ops=SAVE_OPS, rounds=rounds)
        ser_save_rate, ser_rate, ser_ratio = interleaved_rates(
            save, serialize_insert, ops=SAVE_OPS // 2, rounds=rounds
        )
    size = statistics.median(len(d) for d in payloads.values())
    return [
        ("snapshot size (median)", f"{size / 1024:,.1f} KiB, synchronous={store.synchronous}"),
        ("store.save", f"{save_rate:,.0f} /s ({1e3 / save_rate:.2f} ms)"),
        ("bare sqlite3 insert, same bytes", f"{bare_rate:,.0f} /s ({1e3 / bare_rate:.2f} ms)"),
        ("save cost vs bare insert (goal <= 1.5x)", f"{1 / ratio:.2f}x"),
        ("store.save (later, larger snapshots)", f"{ser_save_rate:,.0f} /s"),
        ("serialize() + bare insert, same snapshots", f"{ser_rate:,.0f} /s"),
        ("save cost vs serialize() + bare insert", f"{1 / ser_ratio:.2f}x"),
    ]


def _disk(db: Path) -> int:
    names = (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))
    return sum(p.stat().st_size for p in names if p.exists())


def _fill(db: Path, turns: int, **kwargs: Any) -> tuple[Snapshot, int, int, int]:
    """Checkpoint every turn; returns final snapshot, peak and final bytes open, bytes closed."""
    peak = 0
    with SQLiteCheckpointStore(db, **kwargs) as store:
        for final in conversation(turns):
            store.save(final)
            peak = max(peak, _disk(db))
        open_bytes = _disk(db)
    return final, peak, open_bytes, _disk(db)


def load_and_disk_figures(directory: Path) -> list[tuple[str, str]]:
    final, peak, open_bytes, closed = _fill(directory / "default.db", 1000)
    size = len(final.serialize())
    rows = [
        ("1,000 turns: final snapshot", f"{size / 1024:,.0f} KiB, {final.state['turns']} turns"),
        ("disk / final, defaults, closed (goal <= 3)", f"{closed / size:.2f}"),
        ("disk / final, defaults, open (db+wal+shm)", f"{open_bytes / size:.2f}"),
        ("disk / final, defaults, peak while writing", f"{peak / size:.2f}"),
    ]
    db = directory / "all.db"
    _, _, _, all_closed = _fill(db, 1000, keep_last=None)
    rows.append(("disk / final, keep_last=None, closed", f"{all_closed / size:.2f}"))
    timings = []
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        assert len(store.list("bench")) == 1000
        latest = store.load("bench")
        data = latest.serialize()
        for _ in range(LOAD_SAMPLES):
            start = time.perf_counter()
            store.load("bench")
            timings.append(time.perf_counter() - start)
    decode: Callable[[], object] = lambda: Snapshot.deserialize(data)  # noqa: E731
    decode_ms = min(_time(decode) for _ in range(20)) * 1e3
    rows += [
        ("load latest of 1,000 checkpoints: p50", f"{percentile(timings, 50) * 1e3:.2f} ms"),
        ("load latest of 1,000 checkpoints: p99", f"{percentile(timings, 99) * 1e3:.2f} ms"),
        ("  (deserialize of the same bytes alone)", f"{decode_ms:.2f} ms"),
    ]
    return rows


def _no_seal(
    body: bytes, ref: LogRef, parts: bytes | None = None, *, checked: bool = False
) -> bytes:
    return b""


def _no_verify(check: object, body: object, ref: LogRef, parts: object = None) -> bool:
    return False


def checksum_figures(directory: Path) -> list[tuple[str, str]]:
    """Save + load latest, checksummed vs not, on two stores fed the same snapshots."""
    rounds, ops = 7, 20
    stream = list(conversation(75 + (rounds + 1) * ops + 4))[75:]  # 300 messages and up
    checked_store = SQLiteCheckpointStore(directory / "checked.db")
    bare_store = SQLiteCheckpointStore(directory / "unchecked.db")
    checked_snaps, bare_snaps = iter(stream), iter(stream)

    def checked() -> object:
        message_log_module.seal, message_log_module.verify = seal, verify
        checked_store.save(next(checked_snaps))
        return checked_store.load("bench")

    def unchecked() -> object:
        message_log_module.seal, message_log_module.verify = _no_seal, _no_verify
        bare_store.save(next(bare_snaps))
        return bare_store.load("bench")

    try:
        with checked_store, bare_store:
            checked_rate, bare_rate, ratio = interleaved_rates(
                checked, unchecked, ops=ops, rounds=rounds
            )
    finally:
        message_log_module.seal, message_log_module.verify = seal, verify
    body = stream[0].serialize()
    check = seal(body, (None, None, None, None))
    seal_us = min(_time(lambda: verify(check, body, (None,) * 4)) for _ in range(50)) * 1e6
    return [
        ("messages in the session", f"{len(stream[0].state['messages'])} and up"),
        ("save + load, checksummed", f"{checked_rate:,.0f} /s ({1e3 / checked_rate:.2f} ms)"),
        ("save + load, seal/verify as no-ops", f"{bare_rate:,.0f} /s ({1e3 / bare_rate:.2f} ms)"),
        ("checksum cost vs none (goal <= 1.1x)", f"{1 / ratio:.2f}x"),
        (f"verify of a whole {len(body) // 1024} KiB body alone", f"{seal_us:.1f} us"),
    ]


def encryption_figures(directory: Path) -> list[tuple[str, str]]:
    """Save + load latest, and save alone, encrypted vs plaintext, fed the same snapshots."""
    rounds, ops = 7, 20
    stream = list(conversation(75 + 2 * (rounds + 1) * ops + 8))[75:]  # 300 messages and up
    keys = EncryptionKeys({"bench": EncryptionKeys.new_key()})
    sealed_store = SQLiteCheckpointStore(directory / "encrypted.db", encryption=keys)
    plain_store = SQLiteCheckpointStore(directory / "plain.db")
    sealed_snaps, plain_snaps = iter(stream), iter(stream)

    def sealed_step() -> object:
        sealed_store.save(next(sealed_snaps))
        return sealed_store.load("bench")

    def plain_step() -> object:
        plain_store.save(next(plain_snaps))
        return plain_store.load("bench")

    def sealed_save() -> object:
        return sealed_store.save(next(sealed_snaps))

    def plain_save() -> object:
        return plain_store.save(next(plain_snaps))

    with sealed_store, plain_store:
        step_rate, plain_rate, ratio = interleaved_rates(
            sealed_step, plain_step, ops=ops, rounds=rounds
        )
        save_rate, plain_save_rate, save_ratio = interleaved_rates(
            sealed_save, plain_save, ops=ops, rounds=rounds
        )
    return [
        ("messages in the session", f"{len(stream[0].state['messages'])} and up"),
        ("save + load, encrypted", f"{step_rate:,.0f} /s ({1e3 / step_rate:.2f} ms)"),
        ("save + load, plaintext", f"{plain_rate:,.0f} /s ({1e3 / plain_rate:.2f} ms)"),
        ("encryption cost vs none (goal <= 1.5x)", f"{1 / ratio:.2f}x"),
        ("save alone, encrypted", f"{save_rate:,.0f} /s ({1e3 / save_rate:.2f} ms)"),
        ("save alone, plaintext", f"{plain_save_rate:,.0f} /s ({1e3 / plain_save_rate:.2f} ms)"),
        ("save cost, encrypted vs plaintext", f"{1 / save_ratio:.2f}x"),
    ]


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    print_table("1. snapshot codec (300 messages with tool calls)", codec_figures())
    with tempfile.TemporaryDirectory() as tmp:
        print_table("2. SQLiteCheckpointStore.save", save_figures(Path(tmp)))
    with tempfile.TemporaryDirectory() as tmp:
        print_table("2b/3. load latest and bytes on disk", load_and_disk_figures(Path(tmp)))
    with tempfile.TemporaryDirectory() as tmp:
        print_table("4. checkpoint integrity checksum", checksum_figures(Path(tmp)))
    with tempfile.TemporaryDirectory() as tmp:
        print_table("5. encryption at rest (AES-256-GCM)", encryption_figures(Path(tmp)))


if __name__ == "__main__":
    main()
