"""What an ``AgentHost`` stands on: its checkpoint store (its own, in a data directory,
or the caller's), who owns its sessions (the host alone, or a cluster node), and the
runtime its sessions run in. Opened together, because each needs the one before and
a failure part way must close what was opened, in reverse.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor._data_dir import OwnedStore
from supervisor._encryption_keys import EncryptionKeys
from supervisor._ownership import Ownership, ownership_for
from supervisor._runtime import SessionRuntime
from supervisor._runtimes import WorkerOptions, runtime_for
from supervisor._session_threads import DEFAULT_PARKED_THREADS
from supervisor.checkpoint_store import CheckpointStore

if TYPE_CHECKING:
    from supervisor.cluster import NodeConfig

__all__ = ["DEFAULT_DATA_DIR", "HostBacking", "open_backing"]

DEFAULT_DATA_DIR = "sessionvisor-data"


@dataclass(frozen=True, slots=True)
class HostBacking:
    """The opened parts. Thread-safe as they are.

    Attributes:
        store: Where checkpoints go.
        ownership: Which sessions the host may run and save.
        runtime: What runs the sessions.
        close_store: Closes the store and releases the data directory, when the host
            opened them (``None`` for a store the caller gave).
        fingerprint_secret: The data directory's API-key fingerprint key
            (``_fingerprint_secret``); ``None`` (a key per process) with a caller's store.
    """

    store: CheckpointStore
    ownership: Ownership
    runtime: SessionRuntime
    close_store: Callable[[], None] | None
    fingerprint_secret: bytes | None = None


def open_backing(
    store: CheckpointStore | None,
    data_dir: str | Path | None,
    encryption: EncryptionKeys | None,
    node: NodeConfig | None,
    workers: int | None,
    *,
    clock: Callable[[], float] = time.monotonic,
    worker_options: WorkerOptions | None = None,
    parked_threads: int = DEFAULT_PARKED_THREADS,
) -> HostBacking:
    """Open the store (the default one in ``data_dir`` when ``store`` is ``None``), the
    ownership over it, then the runtime; on failure close what was opened.

    Raises:
        ValueError: ``encryption`` with a caller's ``store`` (give that store the keys),
            or bad worker options.
        DataDirLocked, StoreUnavailable, NodeIdInUse, ...: as the part that failed says.
    """
    owned = None
    if store is not None and encryption is not None:
        raise ValueError("encryption= is for the host's own store; pass it to your store")
    if store is None:  # the default store, in a data directory this host then owns
        directory = Path(DEFAULT_DATA_DIR if data_dir is None else data_dir).resolve()
        owned = OwnedStore(directory, encryption)
        store = owned.store
    try:
        ownership = ownership_for(store, node)
        try:
            runtime = runtime_for(workers, clock, worker_options or {}, parked_threads)
        except BaseException:
            ownership.drain()
            raise
    except BaseException:
        if owned is not None:
            owned.close()
        raise
    if owned is None:
        return HostBacking(store, ownership, runtime, None)
    return HostBacking(store, ownership, runtime, owned.close, owned.fingerprint_secret)
