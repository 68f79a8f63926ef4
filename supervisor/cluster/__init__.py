"""Several hosts on one PostgreSQL database: one owner per session, fenced checkpoints,
failover of a dead node's sessions.

A host becomes a node with ``AgentHost(store=PostgresCheckpointStore(...),
node=NodeConfig(node_id=..., address=..., ttl=..., template=...))``. Ownership
lives in the store's ``nodes`` and ``sessions`` tables (``_leases``); a node's
heartbeat, self-fence, sweeper and drain are ``ClusterNode``'s (``_node``).
"""

from supervisor.cluster._config import NodeConfig as NodeConfig
from supervisor.cluster._config import TemplateChoice as TemplateChoice
from supervisor.cluster._leases import LeaseTable as LeaseTable
from supervisor.cluster._leases import Owner as Owner
from supervisor.cluster._node import ClusterNode as ClusterNode

__all__ = ["ClusterNode", "LeaseTable", "NodeConfig", "Owner", "TemplateChoice"]
