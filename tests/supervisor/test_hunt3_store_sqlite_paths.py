"""``SQLiteCheckpointStore``: a path is a file name, whatever it starts with.

SQLite built with URI file names on (Debian's, and so this Python's) reads a name
beginning with ``file:`` as a URI: ``file::memory:`` would be a temporary
database gone on close, which the store refuses as ``:memory:``, and the marker
file beside the store would be written elsewhere than the database.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor import SQLiteCheckpointStore
from tests.supervisor.store_contract import snap


@pytest.mark.parametrize("name", ["file::memory:", "file:x.db?mode=memory", "file:y.db"])
def test_a_path_starting_with_file_colon_is_a_durable_file_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    saved = snap()
    with SQLiteCheckpointStore(name) as store:
        store.save(saved)
    assert (tmp_path / name).is_file()
    assert (tmp_path / f"{name}.sessionvisor").is_file()  # the marker is beside it
    with SQLiteCheckpointStore(name) as reopened:
        assert reopened.load("sess-1") == saved
