"""``doctor`` loads every checkpoint: a row that fails its checksum, or whose message log
fails its digest, is a problem naming it (as ``sessions show`` finds it damaged), not
only damage SQLite finds in the file's pages."""

from __future__ import annotations

import base64
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from actors import AgentTemplate, EchoModel, SnapshotDecodeError
from cli import main
from supervisor import AgentHost, EncryptionKeys, SQLiteCheckpointStore

KEY = b"k" * 32
KEYS_ENTRY = f"k1:{base64.b64encode(KEY).decode()}"


def doctor(data: Path, *extra: str, keys: str | None = None) -> Result:
    env = {EncryptionKeys.VARIABLE: keys}
    return CliRunner(env=env).invoke(main, ["doctor", *extra, "--data-dir", str(data)])


def hosted(tmp_path: Path, *, encrypted: bool = False) -> Path:
    """A data directory a real host wrote: sessions ``s1`` (3 turns) and ``s2`` (1 turn)."""
    data = tmp_path / "data"
    keys = EncryptionKeys({"k1": KEY}) if encrypted else None
    with AgentHost(data_dir=data, encryption=keys) as host:
        template = AgentTemplate(model=EchoModel())
        host.start_session(template, "s1")
        for text in ("one", "two", "three"):
            host.send("s1", text)
        host.start_session(template, "s2")
        host.send("s2", "hello")
    return data


def checkpoint_ids(data: Path, sid: str) -> list[str]:
    with closing(sqlite3.connect(data / "checkpoints.db")) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE session_id = ? ORDER BY checkpoint_id",
            (sid,),
        ).fetchall()
    return [cid for (cid,) in rows]


def flip(data: Path, query: str, params: tuple[object, ...], update: str) -> None:
    """Flip one bit in the middle of the blob ``query`` selects, written back by ``update``
    (which takes the new blob first, then ``params``)."""
    with closing(sqlite3.connect(data / "checkpoints.db")) as conn:
        (blob,) = conn.execute(query, params).fetchone()
        middle = len(blob) // 2
        conn.execute(
            update, (blob[:middle] + bytes([blob[middle] ^ 0x10]) + blob[middle + 1 :], *params)
        )
        conn.commit()


def damage_body(data: Path, cid: str) -> None:
    flip(
        data,
        "SELECT body FROM checkpoints WHERE checkpoint_id = ?",
        (cid,),
        "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?",
    )


def unreadable(data: Path, keys: EncryptionKeys | None = None) -> set[tuple[str, str]]:
    """The checkpoints the store itself refuses to load."""
    found = set()
    with SQLiteCheckpointStore(data / "checkpoints.db", read_only=True, encryption=keys) as store:
        for sid in store.sessions():
            for info in store.list(sid):
                try:
                    store.load(sid, info.checkpoint_id)
                except SnapshotDecodeError:
                    found.add((sid, info.checkpoint_id))
    return found


def test_an_intact_store_passes(tmp_path: Path) -> None:
    data = hosted(tmp_path)
    result = doctor(data, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["problems"], report["warnings"]) == ([], [])
    assert (report["checkpoints_verified"], report["damaged_checkpoints"]) == (True, [])
    text = doctor(data)
    assert text.exit_code == 0, text.output
    assert "checkpoints_verified: True\n" in text.stdout
    assert "damaged_checkpoints: 0\n" in text.stdout
    assert text.stdout.endswith("no problems found\n")


def test_a_damaged_body_is_named(tmp_path: Path) -> None:
    data = hosted(tmp_path)
    ids = checkpoint_ids(data, "s1")
    assert len(ids) > 1
    bad = ids[len(ids) // 2]
    damage_body(data, bad)
    assert unreadable(data) == {("s1", bad)}

    result = doctor(data, "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["checkpoints_verified"] is True
    [entry] = report["damaged_checkpoints"]
    assert (entry["session_id"], entry["checkpoint_id"]) == ("s1", bad)
    assert "checksum" in entry["reason"]
    assert "\n" not in entry["reason"]
    assert report["problems"] == [
        f"checkpoint {bad!r} of session 's1' cannot be read ({entry['reason']}): a host "
        "resumes the session from its newest checkpoint that loads; restore the store from a "
        "backup to get this one back"
    ]
    assert report["integrity"] == ["ok"]  # SQLite's pages are fine: only the row is not

    text = doctor(data)
    assert text.exit_code == 1
    assert text.stdout.splitlines()[-1] == f"PROBLEM: {report['problems'][0]}"


def test_damage_in_a_message_log_names_every_checkpoint_it_breaks(tmp_path: Path) -> None:
    data = hosted(tmp_path)
    flip(
        data,
        "SELECT data FROM message_chunks WHERE session_id = ? ORDER BY start LIMIT 1",
        ("s1",),
        "UPDATE message_chunks SET data = ? WHERE session_id = ? AND start = 0",
    )
    broken = unreadable(data)
    assert broken
    result = doctor(data, "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    named = {(d["session_id"], d["checkpoint_id"]) for d in report["damaged_checkpoints"]}
    assert named == broken
    assert len(report["problems"]) == len(broken)


def test_an_encrypted_store_without_keys_is_not_verified(tmp_path: Path) -> None:
    """Without ``SESSIONVISOR_KEYS`` the bodies cannot be checked: said so, not failed."""
    data = hosted(tmp_path, encrypted=True)
    damage_body(data, checkpoint_ids(data, "s1")[0])
    result = doctor(data, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["problems"] == []
    assert (report["checkpoints_verified"], report["damaged_checkpoints"]) == (False, [])
    assert report["warnings"] == [
        f"the checkpoints in {data / 'checkpoints.db'} were not verified: the store is "
        f"encrypted; set {EncryptionKeys.VARIABLE} as the host has it to verify them"
    ]
    text = doctor(data)
    assert f"WARNING: {report['warnings'][0]}\n" in text.stdout


@pytest.mark.parametrize("damaged", [False, True])
def test_an_encrypted_store_is_verified_with_its_keys(tmp_path: Path, damaged: bool) -> None:
    data = hosted(tmp_path, encrypted=True)
    bad = checkpoint_ids(data, "s2")[0]
    if damaged:
        damage_body(data, bad)
    result = doctor(data, "--json", keys=KEYS_ENTRY)
    report = json.loads(result.stdout)
    assert report["checkpoints_verified"] is True
    assert report["warnings"] == []
    if not damaged:
        assert (result.exit_code, report["damaged_checkpoints"]) == (0, [])
        return
    assert result.exit_code == 1
    assert [(d["session_id"], d["checkpoint_id"]) for d in report["damaged_checkpoints"]] == [
        ("s2", bad)
    ]
    assert "fails authentication" in report["damaged_checkpoints"][0]["reason"]


def test_keys_that_cannot_read_the_store_leave_it_unverified(tmp_path: Path) -> None:
    data = hosted(tmp_path, encrypted=True)
    other = f"k9:{base64.b64encode(b'9' * 32).decode()}"
    result = doctor(data, "--json", keys=other)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["checkpoints_verified"] is False
    [warning] = report["warnings"]
    assert warning.startswith(f"the checkpoints in {data / 'checkpoints.db'} were not verified: ")
    assert "'k1' is used by this store but missing from the key ring" in warning
