"""A child process for the SQLite store's multi-process and kill -9 tests.

Run as ``python -m tests.supervisor.checkpoint_worker DB TAG START COUNT [THREADS]``
from the repository root. It opens the store (keeping every checkpoint), prints
``ready``, waits for a line on stdin, then saves the snapshots
``expected_state(TAG, i)`` for ``i`` in ``START .. START+COUNT-1`` (COUNT 0:
forever) and after each save *returns* prints ``ack <tag> <i> <checkpoint_id>``.
Sessions alternate between ``TAG`` and ``shared``, so concurrent workers also
write one session together. With ``THREADS`` > 1, that many threads each do
the same at once, thread ``n`` as tag ``TAG.n`` (so their saves are committed
in shared batches).
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterable
from typing import Any

from actors import Snapshot
from supervisor import SQLiteCheckpointStore
from tests.actors.snapshot_helpers import session_state

__all__ = ["expected_state", "session_for"]

_PRINT = threading.Lock()


def session_for(tag: str, index: int) -> str:
    """The session the ``index``-th save of worker ``tag`` goes to."""
    return "shared" if index % 3 == 0 else tag


def expected_state(tag: str, index: int) -> dict[str, Any]:
    """The state of the ``index``-th save of worker ``tag`` (its history grows with index)."""
    state = session_state(index % 40, session_id=session_for(tag, index), pad=20)
    state["metadata"] = {"worker": tag, "index": index}
    return state


def _save_all(store: SQLiteCheckpointStore, tag: str, indexes: Iterable[int]) -> None:
    for index in indexes:
        snapshot = Snapshot.new(
            session_id=session_for(tag, index),
            state=expected_state(tag, index),
            label=f"{tag}:{index}",
        )
        store.save(snapshot)
        with _PRINT:
            print(f"ack {tag} {index} {snapshot.checkpoint_id}", flush=True)


def main(argv: list[str]) -> int:
    path, tag, start, count = argv[0], argv[1], int(argv[2]), int(argv[3])
    threads = int(argv[4]) if len(argv) > 4 else 1
    with SQLiteCheckpointStore(path, keep_last=None) as store:
        print("ready", flush=True)
        sys.stdin.readline()

        def indexes() -> Iterable[int]:
            return itertools.count(start) if count == 0 else range(start, start + count)

        if threads == 1:
            _save_all(store, tag, indexes())
            return 0
        savers = [
            threading.Thread(target=_save_all, args=(store, f"{tag}.{n}", indexes()))
            for n in range(threads)
        ]
        for saver in savers:
            saver.start()
        for saver in savers:
            saver.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
