"""Worker options are checked, and named as the ``AgentHost`` keywords, before any worker
starts.

Before: ``worker_memory_limit=True`` was taken as a limit of 1 byte; a bad
``worker_max_restarts`` or ``worker_max_seconds`` was reported as ``max_restarts`` or
``max_seconds``, which are the host's own keywords (the sessions' restart intensity);
and an unknown ``worker_start_method`` as multiprocessing's "cannot find context".
"""

from __future__ import annotations

from typing import Any

import pytest

from supervisor import AgentHost, MemoryCheckpointStore


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"worker_memory_limit": True}, ValueError, "worker_memory_limit"),
        ({"worker_max_restarts": -1}, ValueError, "worker_max_restarts"),
        ({"worker_max_restarts": 1.5}, TypeError, "worker_max_restarts"),
        ({"worker_max_seconds": 0}, ValueError, "worker_max_seconds"),
        ({"worker_start_method": "bogus"}, ValueError, "worker_start_method"),
        ({"worker_start_method": "fork"}, ValueError, "worker_start_method"),
    ],
)
def test_a_bad_worker_option_is_refused_by_its_name(
    options: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=rf"^{named}\b"):
        AgentHost(MemoryCheckpointStore(), workers=1, **options)
