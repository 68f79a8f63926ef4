"""sessionvisor's lifecycle layer: monitors, supervisors, the session registry,
checkpoint stores, resume and the AgentHost facade.

Imports ``actors``; ``actors`` never imports this package.
"""

from supervisor.errors import CheckpointNotFound as CheckpointNotFound
from supervisor.errors import SessionAlreadyExists as SessionAlreadyExists
from supervisor.errors import SessionNotFound as SessionNotFound
from supervisor.errors import SnapshotTooLarge as SnapshotTooLarge
from supervisor.errors import SupervisorError as SupervisorError

__all__ = [
    "CheckpointNotFound",
    "SessionAlreadyExists",
    "SessionNotFound",
    "SnapshotTooLarge",
    "SupervisorError",
]
