"""Worker processes: sessions isolated in processes the host supervises.

``AgentHost(workers=N)`` runs each session in one of N worker processes
(started with ``forkserver``, or ``spawn`` where it is missing). In the parent
every session is still an actor (a ``WorkerSession`` proxy), so the registry,
monitors and the supervisor treat it exactly as in thread mode; a worker that
dies takes only its own sessions down, and they are resumed from their last
checkpoints on a live worker.
"""

from supervisor.workers._client import WorkerClient as WorkerClient
from supervisor.workers._io import IO_CHOICES as IO_CHOICES
from supervisor.workers._memory_limit import MEMORY_EXIT as MEMORY_EXIT
from supervisor.workers._pool import WorkerPool as WorkerPool
from supervisor.workers._proxy import WorkerSession as WorkerSession
from supervisor.workers._runtime import WorkerRuntime as WorkerRuntime

__all__ = [
    "IO_CHOICES",
    "MEMORY_EXIT",
    "WorkerClient",
    "WorkerPool",
    "WorkerRuntime",
    "WorkerSession",
]
