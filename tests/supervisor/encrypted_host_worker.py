"""A host process on an encrypted store, for the SIGKILL test; the test kills it mid-turn.

Run as ``python -m tests.supervisor.encrypted_host_worker DATA_DIR SESSIONS ROUND`` from
the repository root, with the keys in ``SESSIONVISOR_KEYS``. It starts an
``AgentHost`` on ``DATA_DIR`` with ``encryption=EncryptionKeys.from_env()``
(durable checkpoint after every turn). In round 0 it starts the sessions
``e0 .. e<SESSIONS-1>`` and checkpoints each; in a later round it resumes
them all. It prints ``{"ready": ROUND}``, then converses with every session
at once, one thread each, forever; after each ``send`` *returns* it prints
one JSON line ``{"session": ..., "text": ..., "answer": ...}`` (flushed), so
every such line is an acknowledged turn. Every text holds ``SECRET``.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading

from supervisor import AgentHost, EncryptionKeys
from tests.supervisor.host_helpers import template

__all__ = ["SECRET", "session_ids"]

SECRET = "TOPSECRET"
"""In every text the worker sends, so that a scan of the store can look for it."""


def session_ids(count: int) -> list[str]:
    """The ids the worker gives its sessions."""
    return [f"e{index}" for index in range(count)]


def main(argv: list[str]) -> int:
    data_dir, count, round_ = argv[0], int(argv[1]), int(argv[2])
    print_lock = threading.Lock()
    host = AgentHost(data_dir=data_dir, encryption=EncryptionKeys.from_env())
    chosen = template()
    if round_ == 0:
        for sid in session_ids(count):
            host.start_session(chosen, sid)
            host.checkpoint(sid)
    else:
        host.resume_all(chosen)
    print(json.dumps({"ready": round_}), flush=True)

    def converse(sid: str) -> None:
        for turn in itertools.count():
            text = f"{SECRET} {sid} round {round_} turn {turn}"
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
