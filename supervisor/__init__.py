"""sessionvisor's lifecycle layer: monitors, supervisors, the session registry,
checkpoint stores, resume and the AgentHost facade.

Imports ``actors``; ``actors`` never imports this package.
"""

from supervisor._actor import SupervisedActor as SupervisedActor
from supervisor._actor import kill as kill
from supervisor._actor import supervised_class as supervised_class
from supervisor._actor import terminate as terminate
from supervisor._credentials import CredentialsSource as CredentialsSource
from supervisor._encryption_keys import EncryptionKeys as EncryptionKeys
from supervisor._fingerprint_secret import SECRET_FILE as FINGERPRINT_KEY_FILE
from supervisor._fingerprint_secret import check_fingerprint_key as check_fingerprint_key
from supervisor._futures import EventWatch as EventWatch
from supervisor._futures import HostFutures as HostFutures
from supervisor._host_record import SessionInfo as SessionInfo
from supervisor._host_record import SessionStatus as SessionStatus
from supervisor._lifecycle import NOPROC as NOPROC
from supervisor._lifecycle import NORMAL as NORMAL
from supervisor._lifecycle import SHUTDOWN as SHUTDOWN
from supervisor._lifecycle import Down as Down
from supervisor._lifecycle import ExitReason as ExitReason
from supervisor._lifecycle import MonitorRef as MonitorRef
from supervisor._lifecycle import is_abnormal as is_abnormal
from supervisor._runtime import NotDelivered as NotDelivered
from supervisor._runtime import WorkerInfo as WorkerInfo
from supervisor._runtimes import WorkerOptions as WorkerOptions
from supervisor._session_attrs import SessionAttrs as SessionAttrs
from supervisor._session_attrs import SessionMetadata as SessionMetadata
from supervisor._session_attrs import check_tenant_id as check_tenant_id
from supervisor.aio import AsyncAgentHost as AsyncAgentHost
from supervisor.aio import EventStream as EventStream
from supervisor.aio import wait_future as wait_future
from supervisor.checkpoint_store import DEFAULT_KEEP_LAST as DEFAULT_KEEP_LAST
from supervisor.checkpoint_store import CheckpointInfo as CheckpointInfo
from supervisor.checkpoint_store import CheckpointStore as CheckpointStore
from supervisor.checkpoint_store import SnapshotTooNew as SnapshotTooNew
from supervisor.child_spec import ChildCounts as ChildCounts
from supervisor.child_spec import ChildInfo as ChildInfo
from supervisor.child_spec import ChildSpec as ChildSpec
from supervisor.child_spec import RestartType as RestartType
from supervisor.child_spec import Strategy as Strategy
from supervisor.errors import CallAborted as CallAborted
from supervisor.errors import CheckpointNotFound as CheckpointNotFound
from supervisor.errors import ChildAlreadyExists as ChildAlreadyExists
from supervisor.errors import ChildNotFound as ChildNotFound
from supervisor.errors import ChildStartError as ChildStartError
from supervisor.errors import CredentialsUnavailable as CredentialsUnavailable
from supervisor.errors import DataDirLocked as DataDirLocked
from supervisor.errors import EncryptionKeyError as EncryptionKeyError
from supervisor.errors import EncryptionUnavailable as EncryptionUnavailable
from supervisor.errors import HostShutDown as HostShutDown
from supervisor.errors import InvalidEncryptionKeys as InvalidEncryptionKeys
from supervisor.errors import Killed as Killed
from supervisor.errors import NodeFenced as NodeFenced
from supervisor.errors import NodeIdInUse as NodeIdInUse
from supervisor.errors import OwnershipLost as OwnershipLost
from supervisor.errors import RemoteError as RemoteError
from supervisor.errors import RestartIntensityExceeded as RestartIntensityExceeded
from supervisor.errors import SessionAlreadyExists as SessionAlreadyExists
from supervisor.errors import SessionCrashed as SessionCrashed
from supervisor.errors import SessionFailed as SessionFailed
from supervisor.errors import SessionNotFound as SessionNotFound
from supervisor.errors import SessionOwnedElsewhere as SessionOwnedElsewhere
from supervisor.errors import SnapshotTooLarge as SnapshotTooLarge
from supervisor.errors import StoreBusy as StoreBusy
from supervisor.errors import StoreCorrupted as StoreCorrupted
from supervisor.errors import StoreEncrypted as StoreEncrypted
from supervisor.errors import StoreFull as StoreFull
from supervisor.errors import StoreNotEncrypted as StoreNotEncrypted
from supervisor.errors import StoreReadOnly as StoreReadOnly
from supervisor.errors import StoreUnavailable as StoreUnavailable
from supervisor.errors import StoreUnreachable as StoreUnreachable
from supervisor.errors import SupervisorError as SupervisorError
from supervisor.errors import TemplateNotLoadable as TemplateNotLoadable
from supervisor.errors import TemplateNotPicklable as TemplateNotPicklable
from supervisor.errors import WorkerCrashed as WorkerCrashed
from supervisor.errors import WorkerStartError as WorkerStartError
from supervisor.handle import SupervisorHandle as SupervisorHandle
from supervisor.host import AgentHost as AgentHost
from supervisor.intensity import Backoff as Backoff
from supervisor.intensity import RestartIntensity as RestartIntensity
from supervisor.memory_store import MemoryCheckpointStore as MemoryCheckpointStore
from supervisor.monitors import demonitor as demonitor
from supervisor.monitors import monitor as monitor
from supervisor.postgres_store import Fence as Fence
from supervisor.postgres_store import PostgresCheckpointStore as PostgresCheckpointStore
from supervisor.session_store import EvictCallback as EvictCallback
from supervisor.session_store import SessionEntry as SessionEntry
from supervisor.session_store import SessionStore as SessionStore
from supervisor.sqlite_store import SQLiteCheckpointStore as SQLiteCheckpointStore
from supervisor.supervisor import Supervisor as Supervisor
from supervisor.tuning import SWITCH_INTERVAL as SWITCH_INTERVAL
from supervisor.tuning import freeze_startup_objects as freeze_startup_objects
from supervisor.tuning import pin_to_one_cpu as pin_to_one_cpu
from supervisor.tuning import tune_interpreter as tune_interpreter
from supervisor.workers import WorkerPool as WorkerPool

__all__ = [
    "DEFAULT_KEEP_LAST",
    "FINGERPRINT_KEY_FILE",
    "NOPROC",
    "NORMAL",
    "SHUTDOWN",
    "SWITCH_INTERVAL",
    "AgentHost",
    "AsyncAgentHost",
    "Backoff",
    "CallAborted",
    "CheckpointInfo",
    "CheckpointNotFound",
    "CheckpointStore",
    "ChildAlreadyExists",
    "ChildCounts",
    "ChildInfo",
    "ChildNotFound",
    "ChildSpec",
    "ChildStartError",
    "CredentialsSource",
    "CredentialsUnavailable",
    "DataDirLocked",
    "Down",
    "EncryptionKeyError",
    "EncryptionKeys",
    "EncryptionUnavailable",
    "EventStream",
    "EventWatch",
    "EvictCallback",
    "ExitReason",
    "Fence",
    "HostFutures",
    "HostShutDown",
    "InvalidEncryptionKeys",
    "Killed",
    "MemoryCheckpointStore",
    "MonitorRef",
    "NodeFenced",
    "NodeIdInUse",
    "NotDelivered",
    "OwnershipLost",
    "PostgresCheckpointStore",
    "RemoteError",
    "RestartIntensity",
    "RestartIntensityExceeded",
    "RestartType",
    "SQLiteCheckpointStore",
    "SessionAlreadyExists",
    "SessionAttrs",
    "SessionCrashed",
    "SessionEntry",
    "SessionFailed",
    "SessionInfo",
    "SessionMetadata",
    "SessionNotFound",
    "SessionOwnedElsewhere",
    "SessionStatus",
    "SessionStore",
    "SnapshotTooLarge",
    "SnapshotTooNew",
    "StoreBusy",
    "StoreCorrupted",
    "StoreEncrypted",
    "StoreFull",
    "StoreNotEncrypted",
    "StoreReadOnly",
    "StoreUnavailable",
    "StoreUnreachable",
    "Strategy",
    "SupervisedActor",
    "Supervisor",
    "SupervisorError",
    "SupervisorHandle",
    "TemplateNotLoadable",
    "TemplateNotPicklable",
    "WorkerCrashed",
    "WorkerInfo",
    "WorkerOptions",
    "WorkerPool",
    "WorkerStartError",
    "check_fingerprint_key",
    "check_tenant_id",
    "demonitor",
    "freeze_startup_objects",
    "is_abnormal",
    "kill",
    "monitor",
    "pin_to_one_cpu",
    "supervised_class",
    "terminate",
    "tune_interpreter",
    "wait_future",
]
