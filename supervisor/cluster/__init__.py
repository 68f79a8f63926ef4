"""Several hosts on one PostgreSQL database: one owner per session, fenced checkpoints,
failover of a dead node's sessions.

A host becomes a node with ``AgentHost(store=PostgresCheckpointStore(...),
node=NodeConfig(node_id=..., address=..., ttl=..., template=...))``. Ownership
lives in the store's ``nodes`` and ``sessions`` tables (``_leases``); a node's
heartbeat, self-fence, sweeper and drain are ``ClusterNode``'s (``_node``); its
sessions' events reach the other nodes through ``ClusterEvents`` (``_events``,
over a ``_transports`` channel) and are read there with an ``EventFollower``.
"""

from supervisor.cluster._config import MAX_TTL as MAX_TTL
from supervisor.cluster._config import MIN_TTL as MIN_TTL
from supervisor.cluster._config import NodeConfig as NodeConfig
from supervisor.cluster._config import NodeConfigError as NodeConfigError
from supervisor.cluster._config import NodeConfigTypeError as NodeConfigTypeError
from supervisor.cluster._config import TemplateChoice as TemplateChoice
from supervisor.cluster._events import ELIDED as ELIDED
from supervisor.cluster._events import ClusterEvents as ClusterEvents
from supervisor.cluster._events import EventFollower as EventFollower
from supervisor.cluster._leases import LeaseTable as LeaseTable
from supervisor.cluster._leases import Owner as Owner
from supervisor.cluster._node import ClusterNode as ClusterNode

__all__ = [
    "ELIDED",
    "MAX_TTL",
    "MIN_TTL",
    "ClusterEvents",
    "ClusterNode",
    "EventFollower",
    "LeaseTable",
    "NodeConfig",
    "NodeConfigError",
    "NodeConfigTypeError",
    "Owner",
    "TemplateChoice",
]
