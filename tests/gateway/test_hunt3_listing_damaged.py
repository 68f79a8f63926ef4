"""A cluster node lists a session no node answers for from its newest checkpoint; one that
cannot be read (damaged) still lists it, instead of failing the tenant's whole listing
with a 500 (``gateway._listing.ClusterListing``)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, cast

from actors import Snapshot
from gateway._listing import ClusterListing
from gateway.keys import RememberedSession
from supervisor import AgentHost


def _damage_newest(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn:
        (row_id, body) = conn.execute(
            "SELECT id, body FROM checkpoints ORDER BY id DESC LIMIT 1"
        ).fetchone()
        conn.execute("UPDATE checkpoints SET body = ? WHERE id = ?", (body + b"\x00", row_id))
        conn.commit()


def test_a_session_whose_newest_checkpoint_is_damaged_is_listed(tmp_path: Path) -> None:
    with AgentHost(data_dir=tmp_path) as host:
        for turns in (1, 2):
            state: dict[str, Any] = {"messages": [], "turns": turns}
            host.store.save(Snapshot.new(session_id="acme/s", state=state))
        _damage_newest(tmp_path / "checkpoints.db")
        unused = cast(Any, None)  # what listing one session from the store does not use
        listing = ClusterListing(
            host,
            unused,
            unused,
            {},
            http=unused,
            forwarded_header=("X-Forwarded-By", "a"),
        )
        record = RememberedSession("acme/s", "acme", "echo", '{"k": "v"}', 1_700_000_000_000)
        entry = listing._from_store(record, None)
    assert (entry.session_id, entry.status, entry.metadata) == ("s", "hibernated", {"k": "v"})
    assert entry.usage.total == 0
