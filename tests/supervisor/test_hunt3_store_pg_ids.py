"""``PostgresCheckpointStore``: an id too long for the tables' indexes is named in the error.

The checkpoints' key is ``(session_id, checkpoint_id)``: a checkpoint id of thousands
of bytes overflows its index entry as a long session id does. The error must say which
id is too long (it named the session id, however short), and nothing is stored.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import pytest

from supervisor import PostgresCheckpointStore
from tests.supervisor.store_contract import snap


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresCheckpointStore]:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None) as opened:
        yield opened


def test_a_checkpoint_id_too_long_for_the_index_is_named_and_nothing_is_stored(
    store: PostgresCheckpointStore,
) -> None:
    long_id = os.urandom(1600).hex()  # 3,200 bytes that do not compress
    with pytest.raises(
        ValueError, match=r"^checkpoint id '[0-9a-f]{60}'\.\.\. \(3200 bytes\) is"
    ) as caught:
        store.save(dataclasses.replace(snap("s1"), checkpoint_id=long_id))
    assert "session id" not in str(caught.value).split("(")[0]
    assert "Use checkpoint ids of at most 2,000 bytes" in str(caught.value)
    assert store.sessions() == []
    with pytest.raises(ValueError, match=r"^session id '[0-9a-f]{60}'\.\.\. \(3200 bytes\) is"):
        store.save(snap(long_id))
    saved = snap("s1")
    store.save(saved)  # the store goes on
    assert store.load("s1") == saved
