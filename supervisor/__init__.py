"""sessionvisor's lifecycle layer: monitors, supervisors, the session registry,
checkpoint stores, resume and the AgentHost facade.

Imports ``actors``; ``actors`` never imports this package.
"""

from supervisor.checkpoint_store import DEFAULT_KEEP_LAST as DEFAULT_KEEP_LAST
from supervisor.checkpoint_store import CheckpointInfo as CheckpointInfo
from supervisor.checkpoint_store import CheckpointStore as CheckpointStore
from supervisor.errors import CheckpointNotFound as CheckpointNotFound
from supervisor.errors import SessionAlreadyExists as SessionAlreadyExists
from supervisor.errors import SessionNotFound as SessionNotFound
from supervisor.errors import SnapshotTooLarge as SnapshotTooLarge
from supervisor.errors import SupervisorError as SupervisorError
from supervisor.memory_store import MemoryCheckpointStore as MemoryCheckpointStore
from supervisor.sqlite_store import SQLiteCheckpointStore as SQLiteCheckpointStore

__all__ = [
    "DEFAULT_KEEP_LAST",
    "CheckpointInfo",
    "CheckpointNotFound",
    "CheckpointStore",
    "MemoryCheckpointStore",
    "SQLiteCheckpointStore",
    "SessionAlreadyExists",
    "SessionNotFound",
    "SnapshotTooLarge",
    "SupervisorError",
]
