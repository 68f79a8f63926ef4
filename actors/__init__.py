"""sessionvisor's session layer: what runs inside one agent session.

Messages, models, tools, plugins, templates, the ``AgentSession`` actor and
snapshots. Never imports ``supervisor``.
"""

from actors._codec import decode_plain as decode_plain
from actors._codec import encode_plain as encode_plain
from actors._session_calls import GetHistory as GetHistory
from actors._session_calls import Send as Send
from actors._session_calls import TakeSnapshot as TakeSnapshot
from actors._step import StepKey as StepKey
from actors._step import current_step as current_step
from actors._strip import STRIPPED_KEY as STRIPPED_KEY
from actors._strip import LiveResource as LiveResource
from actors._strip import is_stripped_marker as is_stripped_marker
from actors.errors import ActorsError as ActorsError
from actors.errors import CheckpointAborted as CheckpointAborted
from actors.errors import InvalidMessage as InvalidMessage
from actors.errors import ModelCallAborted as ModelCallAborted
from actors.errors import ModelScriptExhausted as ModelScriptExhausted
from actors.errors import PluginError as PluginError
from actors.errors import ProviderError as ProviderError
from actors.errors import RegistryProfileMissing as RegistryProfileMissing
from actors.errors import SnapshotDecodeError as SnapshotDecodeError
from actors.errors import SnapshotEncodeError as SnapshotEncodeError
from actors.errors import SteeringQueueFull as SteeringQueueFull
from actors.errors import ToolDefinitionError as ToolDefinitionError
from actors.errors import TurnLimitExceeded as TurnLimitExceeded
from actors.errors import UnknownModel as UnknownModel
from actors.errors import UnsendableRequest as UnsendableRequest
from actors.events import RESERVED_EVENT_TYPES as RESERVED_EVENT_TYPES
from actors.events import Event as Event
from actors.events import EventBatch as EventBatch
from actors.events import EventBuffer as EventBuffer
from actors.events import Subscriber as Subscriber
from actors.messages import Message as Message
from actors.messages import Role as Role
from actors.messages import ToolCall as ToolCall
from actors.messages import Usage as Usage
from actors.migrations import SNAPSHOT_MIGRATIONS as SNAPSHOT_MIGRATIONS
from actors.migrations import MigrationRegistry as MigrationRegistry
from actors.model import EchoModel as EchoModel
from actors.model import GenerateModel as GenerateModel
from actors.model import Model as Model
from actors.model import ModelResponse as ModelResponse
from actors.model import RespondModel as RespondModel
from actors.model import ScriptedModel as ScriptedModel
from actors.plugins import Plugin as Plugin
from actors.plugins import PluginContext as PluginContext
from actors.providers import ModelFactory as ModelFactory
from actors.providers import ProviderRegistry as ProviderRegistry
from actors.redact import is_secret_key as is_secret_key
from actors.redact import is_secret_value as is_secret_value
from actors.redact import redact_secrets as redact_secrets
from actors.redact import strip_secrets as strip_secrets
from actors.request import Credentials as Credentials
from actors.request import ModelRequest as ModelRequest
from actors.session import AgentSession as AgentSession
from actors.snapshot import SCHEMA_VERSION as SCHEMA_VERSION
from actors.snapshot import Snapshot as Snapshot
from actors.snapshot import schema_version as schema_version
from actors.steering import SteeringQueue as SteeringQueue
from actors.streaming import INVALID_ARGUMENTS as INVALID_ARGUMENTS
from actors.streaming import Delta as Delta
from actors.streaming import StreamAssembler as StreamAssembler
from actors.streaming import TextDelta as TextDelta
from actors.streaming import ToolCallDelta as ToolCallDelta
from actors.streaming import parse_tool_arguments as parse_tool_arguments
from actors.template import AgentTemplate as AgentTemplate
from actors.tools import Tool as Tool
from actors.tools import tool as tool

__all__ = [
    "INVALID_ARGUMENTS",
    "RESERVED_EVENT_TYPES",
    "SCHEMA_VERSION",
    "SNAPSHOT_MIGRATIONS",
    "STRIPPED_KEY",
    "ActorsError",
    "AgentSession",
    "AgentTemplate",
    "CheckpointAborted",
    "Credentials",
    "Delta",
    "EchoModel",
    "Event",
    "EventBatch",
    "EventBuffer",
    "GenerateModel",
    "GetHistory",
    "InvalidMessage",
    "LiveResource",
    "Message",
    "MigrationRegistry",
    "Model",
    "ModelCallAborted",
    "ModelFactory",
    "ModelRequest",
    "ModelResponse",
    "ModelScriptExhausted",
    "Plugin",
    "PluginContext",
    "PluginError",
    "ProviderError",
    "ProviderRegistry",
    "RegistryProfileMissing",
    "RespondModel",
    "Role",
    "ScriptedModel",
    "Send",
    "Snapshot",
    "SnapshotDecodeError",
    "SnapshotEncodeError",
    "SteeringQueue",
    "SteeringQueueFull",
    "StepKey",
    "StreamAssembler",
    "Subscriber",
    "TakeSnapshot",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolDefinitionError",
    "TurnLimitExceeded",
    "UnknownModel",
    "UnsendableRequest",
    "Usage",
    "current_step",
    "decode_plain",
    "encode_plain",
    "is_secret_key",
    "is_secret_value",
    "is_stripped_marker",
    "parse_tool_arguments",
    "redact_secrets",
    "schema_version",
    "strip_secrets",
    "tool",
]
