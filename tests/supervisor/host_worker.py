"""A host process for the whole-process restart test; the test SIGKILLs it mid-conversation.

Run as ``python -m tests.supervisor.host_worker DATA_DIR SESSIONS`` from the
repository root. It starts an ``AgentHost`` on ``DATA_DIR`` (its default
SQLite store, durable checkpoint after every turn), starts the sessions
``w0 .. w<SESSIONS-1>`` (each with the ``Journal`` plugin), then converses
with them round-robin forever, one thread per session. After each ``send``
*returns* it prints one JSON line ``{"session": ..., "text": ..., "answer": ...}``
(flushed), so every line the test reads is an acknowledged turn.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading

from supervisor import AgentHost
from tests.supervisor.host_helpers import Journal, template

__all__ = ["session_ids"]


def session_ids(count: int) -> list[str]:
    """The ids the worker gives its sessions."""
    return [f"w{index}" for index in range(count)]


def main(argv: list[str]) -> int:
    data_dir, count = argv[0], int(argv[1])
    print_lock = threading.Lock()
    host = AgentHost(data_dir=data_dir)
    chosen = template(Journal())
    for sid in session_ids(count):
        host.start_session(chosen, sid, tenant_id="worker")

    def converse(sid: str) -> None:
        for turn in itertools.count():
            text = f"{sid} turn {turn}"
            answer = host.send(sid, text)
            with print_lock:
                print(json.dumps({"session": sid, "text": text, "answer": answer.content}))
                sys.stdout.flush()

    threads = [threading.Thread(target=converse, args=(sid,)) for sid in session_ids(count)]
    for thread in threads:
        thread.start()
    for thread in threads:  # until the test kills the process
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
