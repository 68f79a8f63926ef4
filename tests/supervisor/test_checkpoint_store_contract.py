"""The store contract (``store_contract.py``) on the memory and SQLite stores.

PostgreSQL runs it in ``test_postgres_store.py``; a new backend adds a subclass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor import (
    CheckpointStore,
    EncryptionKeys,
    MemoryCheckpointStore,
    SQLiteCheckpointStore,
)
from tests.supervisor.store_contract import CheckpointStoreContract, MakeStore

KEYS = EncryptionKeys({"contract": bytes(range(32))})

BACKENDS: dict[str, Callable[[Path], MakeStore]] = {
    "memory": lambda tmp: MemoryCheckpointStore,
    "sqlite": lambda tmp: lambda **kw: SQLiteCheckpointStore(tmp / "checkpoints.db", **kw),
    "sqlite-encrypted": lambda tmp: (
        lambda **kw: SQLiteCheckpointStore(tmp / "checkpoints.db", encryption=KEYS, **kw)
    ),
}


class TestLocalStores(CheckpointStoreContract):
    """The contract on each local backend (``BACKENDS``)."""

    @pytest.fixture(params=sorted(BACKENDS))
    def make_store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
        opened: list[CheckpointStore] = []

        def make(**kwargs: Any) -> CheckpointStore:
            store = BACKENDS[request.param](tmp_path)(**kwargs)
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()
