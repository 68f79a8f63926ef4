"""sessionvisor's session layer: what runs inside one agent session.

Messages, models, tools, plugins, templates, the ``AgentSession`` actor and
snapshots. Never imports ``supervisor``.
"""

from actors.errors import ActorsError as ActorsError
from actors.errors import InvalidMessage as InvalidMessage
from actors.errors import ModelScriptExhausted as ModelScriptExhausted
from actors.errors import PluginError as PluginError
from actors.errors import RegistryProfileMissing as RegistryProfileMissing
from actors.errors import SnapshotDecodeError as SnapshotDecodeError
from actors.errors import SnapshotEncodeError as SnapshotEncodeError
from actors.errors import SteeringQueueFull as SteeringQueueFull
from actors.errors import ToolDefinitionError as ToolDefinitionError
from actors.errors import TurnLimitExceeded as TurnLimitExceeded
from actors.messages import Message as Message
from actors.messages import Role as Role
from actors.messages import ToolCall as ToolCall
from actors.messages import Usage as Usage

__all__ = [
    "ActorsError",
    "InvalidMessage",
    "Message",
    "ModelScriptExhausted",
    "PluginError",
    "RegistryProfileMissing",
    "Role",
    "SnapshotDecodeError",
    "SnapshotEncodeError",
    "SteeringQueueFull",
    "ToolCall",
    "ToolDefinitionError",
    "TurnLimitExceeded",
    "Usage",
]
