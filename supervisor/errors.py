"""Every error the supervision layer raises, in one place.

Each class says how it differs from its siblings, so callers can tell a session
that is gone because it was stopped from one that crashed, and a checkpoint that
does not exist from one that exists but cannot be read.
"""

from __future__ import annotations

import os
import socket

__all__ = [
    "CallAborted",
    "CheckpointNotFound",
    "ChildAlreadyExists",
    "ChildNotFound",
    "ChildStartError",
    "CredentialsUnavailable",
    "DataDirLocked",
    "EncryptionKeyError",
    "EncryptionUnavailable",
    "HostShutDown",
    "InvalidEncryptionKeys",
    "Killed",
    "NodeFenced",
    "NodeIdInUse",
    "OwnershipLost",
    "RemoteError",
    "RestartIntensityExceeded",
    "SessionAlreadyExists",
    "SessionCrashed",
    "SessionFailed",
    "SessionNotFound",
    "SessionOwnedElsewhere",
    "SnapshotTooLarge",
    "StoreBusy",
    "StoreCorrupted",
    "StoreEncrypted",
    "StoreFull",
    "StoreNotEncrypted",
    "StoreReadOnly",
    "StoreUnavailable",
    "StoreUnreachable",
    "SupervisorError",
    "TemplateNotLoadable",
    "TemplateNotPicklable",
    "WorkerCrashed",
    "WorkerStartError",
]


class SupervisorError(Exception):
    """Base class of every error raised by the ``supervisor`` package."""


class HostShutDown(SupervisorError, RuntimeError):
    """The ``AgentHost`` was shut down: before the call, or while it waited (a non-blocking
    call still queued or unresolved then).

    The sessions are not gone: their checkpoints stand, and a new host on the same store
    resumes them; a server answers it as retryable (send again once it is back, or to
    another node). A ``RuntimeError``, as it always was.
    """

    def __init__(self, detail: str = "this AgentHost is shut down; create a new one") -> None:
        super().__init__(detail)


class CallAborted(SupervisorError, RuntimeError):
    """A call's work raised ``SystemExit`` or ``KeyboardInterrupt`` (or a group holding one)
    on a thread of the host, where it cannot stop the program: a checkpoint store's
    ``save`` or ``load``, say, run by a session's thread, a helper thread or the reader
    of a worker's pipe. The call failed; nothing else did (a turn whose save it was is
    rolled back, and the session goes on). ``error`` is the original, also the
    ``__cause__``: its traceback shows what raised it. A blocking call made on the main
    thread, where those two mean "stop the program", raises them as they are instead.
    """

    def __init__(self, error: BaseException, during: str = "the call") -> None:
        self.error = error
        self.during = during
        super().__init__(
            f"{during} raised {error!r} on a thread of the host, where it cannot stop the "
            f"program; the call failed instead (see the __cause__ for what raised it)"
        )
        self.__cause__ = error

    def __reduce__(self) -> tuple[type[CallAborted], tuple[BaseException, str]]:
        return (CallAborted, (self.error, self.during))


class SessionAlreadyExists(SupervisorError):
    """A session id is already taken; the message says by what, and what to do."""

    def __init__(self, session_id: str, detail: str = "use another id or delete it first") -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} already exists; {detail}")


class SessionNotFound(SupervisorError, LookupError):
    """No live session is registered under the id (never created, deleted, or its actor died)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no live session {session_id!r} is registered")


class SessionCrashed(SupervisorError):
    """A call could not be answered because the session crashed (during the call, or
    it is being restarted and did not come back in time).

    The supervisor restarts it from its last checkpoint: a turn that raised this
    was not acknowledged, so retry it. Differs from ``SessionFailed`` (given up).
    """

    def __init__(self, session_id: str, detail: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} crashed: {detail}; retry once it is back")


class SessionFailed(SupervisorError):
    """The session kept crashing past its restart intensity and was given up.

    It is no longer restarted; its checkpoints are kept. Fix the cause, then
    bring it back with ``AgentHost.resume``.
    """

    def __init__(self, session_id: str, reason: object) -> None:
        self.session_id = session_id
        self.reason = reason
        super().__init__(
            f"session {session_id!r} was given up after repeated crashes (last: {reason!r}); "
            "fix the cause and call resume()"
        )


class CheckpointNotFound(SupervisorError, LookupError):
    """The store holds no checkpoint for the session (or not the one asked for).

    Differs from ``actors.SnapshotDecodeError``: that one means a checkpoint
    exists but its bytes cannot be read.
    """

    def __init__(self, session_id: str, checkpoint_id: str | None = None) -> None:
        self.session_id = session_id
        self.checkpoint_id = checkpoint_id
        what = "checkpoint" if checkpoint_id is None else f"checkpoint {checkpoint_id!r}"
        super().__init__(f"no {what} stored for session {session_id!r}")


class SnapshotTooLarge(SupervisorError, ValueError):
    """A save was refused because the serialized snapshot exceeds ``max_snapshot_bytes``.

    Nothing was stored; trim the conversation or raise the limit.
    """

    def __init__(self, session_id: str, size: int, limit: int) -> None:
        self.session_id = session_id
        self.size = size
        self.limit = limit
        super().__init__(
            f"snapshot of session {session_id!r} is {size} bytes, over the "
            f"max_snapshot_bytes limit of {limit}; nothing was stored"
        )


class Killed(SupervisorError):
    """The exit reason of an actor stopped on purpose by ``supervisor.kill``.

    Abnormal, so supervisors restart it like any crash; differs from a crash in
    that ``reason`` says who wanted it and why.
    """

    def __init__(self, reason: str = "killed") -> None:
        self.reason = reason
        super().__init__(f"killed: {reason}")


class ChildStartError(SupervisorError):
    """A child's start function raised or did not return a SupervisedActor's ref.

    Raised to whoever asked for the start (``Supervisor.start``, ``start_child``);
    the underlying error is the ``__cause__``. Differs from a child that started
    and then crashed: that one is restarted by policy, this one never ran. A
    ``BaseException`` that is not an ``Exception`` (``SystemExit`` raised by user
    code in a start function) arrives wrapped in this too, and ``AgentHost``
    raises it as is for a session (``child_id`` is the session id), where an
    ordinary error is raised unwrapped.
    """

    def __init__(self, child_id: str, cause: BaseException) -> None:
        self.child_id = child_id
        self.cause = cause
        if isinstance(cause, Exception):
            super().__init__(f"child {child_id!r} failed to start: {cause!r}")
            return
        super().__init__(
            f"child {child_id!r} failed to start: its start function raised {cause!r} "
            f"({type(cause).__name__} is not an Exception; it was caught so the supervisor "
            "and its other children go on); find what raised it in the __cause__'s "
            "traceback (a model factory, a template's pickling, a plugin)"
        )


class CredentialsUnavailable(SupervisorError):
    """The host's ``credentials`` callback raised (or returned something that is not
    credentials) for a session's tenant, so that session could not start or resume.

    Differs from a model that failed on a turn: nothing ran, and the session keeps
    its checkpoints; fix the credential source and ``resume`` it (a crash restart
    counts against its restart intensity). The callback's own error is the
    ``__cause__``; the message never holds a credential.
    """

    def __init__(self, tenant_id: str, problem: str) -> None:
        self.tenant_id = tenant_id
        super().__init__(
            f"no credentials for tenant {tenant_id!r}: {problem}; fix the host's credentials "
            "callback (it gets the tenant id and returns Credentials, an API key str or None)"
        )


class ChildAlreadyExists(SupervisorError):
    """``start_child`` was given an id that a running child of the supervisor already uses."""

    def __init__(self, child_id: str) -> None:
        self.child_id = child_id
        super().__init__(f"the supervisor already has a child {child_id!r}; use another id")


class ChildNotFound(SupervisorError, LookupError):
    """The supervisor has no child with that id (never added, terminated, or not restarted)."""

    def __init__(self, child_id: str) -> None:
        self.child_id = child_id
        super().__init__(f"the supervisor has no child {child_id!r}")


class RestartIntensityExceeded(SupervisorError):
    """A supervisor gave up: its children needed more restarts than its intensity allows.

    This is the exit reason its watchers see in their ``Down`` (and the reason a
    parent supervisor acts on, so the failure travels up the tree). The last
    child exit reason that triggered it is ``last_reason`` (and the
    ``__cause__`` when it is an exception).
    """

    def __init__(
        self,
        supervisor: str,
        child_id: str,
        last_reason: object,
        max_restarts: int,
        max_seconds: float,
    ) -> None:
        self.supervisor = supervisor
        self.child_id = child_id
        self.last_reason = last_reason
        self.max_restarts = max_restarts
        self.max_seconds = max_seconds
        super().__init__(
            f"supervisor {supervisor} gave up: restarting child {child_id!r} (exit reason "
            f"{last_reason!r}) would exceed max_restarts={max_restarts} within "
            f"max_seconds={max_seconds}"
        )


class WorkerCrashed(SessionCrashed):
    """A call could not be answered because the worker *process* running the session died
    (killed by a signal, segfault, ``os._exit``, out of memory, or a call timeout).

    A kind of ``SessionCrashed``: the session is resumed from its last checkpoint
    on a live worker, and a turn that raised this was not acknowledged, so retry
    it. Differs from its parent in the cause: the whole worker process died (every
    session on it crashed at once), not only this session. ``pid`` and ``exit_status``
    (the exit code, or ``"signal SIGKILL"``) name the dead worker.
    """

    def __init__(self, pid: int | None, exit_status: str, session_id: str | None = None) -> None:
        self.pid = pid
        self.exit_status = exit_status
        self.session_id = session_id  # type: ignore[assignment]  # None: not about one session
        who = "" if session_id is None else f"session {session_id!r}: "
        SupervisorError.__init__(
            self, f"{who}worker process pid {pid} died ({exit_status}); retry once it is resumed"
        )


class RemoteError(SupervisorError):
    """An exception raised inside a worker process whose class could not be rebuilt here.

    A worker's exception normally reaches the caller as its own class (as in
    thread mode); this stands in for it when that class is not available in
    this process: its module was never imported here (import it in the host),
    it is defined inside a function, or it cannot be created without its
    ``__init__``. ``type_name`` and ``type_module`` are the original class's
    ``__qualname__`` and ``__module__``, ``remote_message`` its ``str()``,
    ``remote_traceback`` the traceback formatted in the worker (also the
    ``__cause__``) and ``reason`` why the class could not be rebuilt. Not a
    crash: the session lives on, as when the model raises in thread mode.
    Immutable once built: safe to share between threads.
    """

    def __init__(
        self,
        type_name: str,
        remote_message: str,
        *,
        type_module: str = "",
        remote_traceback: str = "",
        reason: str = "",
    ) -> None:
        self.type_name = type_name
        self.type_module = type_module
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback
        self.reason = reason
        where = f"{type_module}.{type_name}" if type_module else type_name
        why = f"; {reason}" if reason else ""
        super().__init__(f"{where}: {remote_message} (raised in a worker process{why})")


class TemplateNotPicklable(SupervisorError, TypeError):
    """A template cannot be sent to a worker process: cloudpickle refused one of its parts.

    ``attribute`` names the part: ``model (<class>)``, ``model (resolved from
    '<model string>')`` for a model the host's ProviderRegistry built,
    ``tools[<i>] (<name>)``, ``plugins[<i>] (<name>)`` or ``instructions``
    (``template`` when no single part is to blame). Nothing was started. The
    message ends with the fix that fits the part: a model builds its client
    lazily, a tool creates its resource when it runs, a plugin in
    ``session_start``; the template itself keeps only configuration.
    """

    def __init__(self, attribute: str, error: BaseException) -> None:
        self.attribute = attribute
        self.error = error
        super().__init__(
            f"the template cannot be sent to a worker process: {attribute} cannot be pickled "
            f"({type(error).__name__}: {error}); {self._advice(attribute)}"
        )

    @staticmethod
    def _advice(attribute: str) -> str:
        """How to make the template part ``attribute`` (as ``TemplateNotPicklable`` names it)
        picklable: live resources are created where that part runs, in the worker."""
        if attribute.startswith("model (resolved from "):
            return (
                "the model its ProviderRegistry factory returned is sent to the workers: have it "
                "build its client lazily on first use (e.g. in generate)"
            )
        if attribute.startswith("model"):
            return (
                "build the model's client lazily on first use (e.g. in generate) and keep only "
                "plain configuration on the model"
            )
        if attribute.startswith("tools["):
            return (
                "create the resource inside the tool function, or keep only plain configuration "
                "in its closure"
            )
        if attribute.startswith("plugins["):
            return (
                "create live resources in session_start (they are rebuilt on resume) and keep "
                "only configuration on the plugin"
            )
        return (
            "keep only configuration in the template; create live resources where they are used "
            "(in a tool, on the model's first call, in a plugin's session_start)"
        )


class TemplateNotLoadable(SupervisorError, ImportError):
    """A worker process could not load a template the host sent it: a module its classes
    or functions come from is not importable there, its import raised (``sys.exit``
    included), or cloudpickle could not rebuild a part.

    The host pickled it fine: unlike ``TemplateNotPicklable`` the problem is the
    worker's environment. A worker imports those modules by name (the main file's
    parts travel whole), with the ``sys.path``, environment and working directory
    its host had when the workers' server started. Nothing was started, and the
    worker serves its other sessions on. An operator's configuration error:
    retrying does not help. ``template`` describes the template (its model, tools
    and plugins, with where each comes from), ``pid`` is the worker's, and
    ``problem`` the underlying error as ``Type: message``; that error is the
    ``__cause__`` and ``error`` (its own class when this process has it, else a
    ``RemoteError`` with its text). An ``ImportError``, as the worker's error
    usually is.
    """

    def __init__(self, template: str, pid: int, error: BaseException) -> None:
        self.template = template
        self.pid = pid
        self.error = error
        self.problem = f"{type(error).__name__}: {error}"
        super().__init__(
            f"worker process pid {pid} could not load the agent template ({template}): "
            f"{self.problem}. Each worker imports by name the modules of the template's classes "
            "and functions (those of the main file travel whole): make them importable there "
            "(install the package, or set PYTHONPATH before the host starts: a sys.path change "
            "made after the workers started does not reach them, and relative entries resolve "
            "in the directory the host started in) and their import succeed there (no "
            "sys.exit, no state only the host process has), define those parts in the main "
            "file, or run the sessions in threads (workers=None)"
        )


class WorkerStartError(SupervisorError):
    """A worker process could not start: it exited on its own, or never answered, first.

    Unlike ``WorkerCrashed`` (a running worker died; its sessions are resumed
    on a replacement), a worker that cannot even start would fail the same way
    every time: ``AgentHost(workers=N)`` raises this, and once three replacement
    workers in a row could not start, or starting a replacement kept raising past the
    workers' restart intensity, the host stops replacing them and starting a session
    raises it. The worker's own traceback is on stderr. ``pid`` names
    the worker and ``exit_status`` says how it ended (``exit code 1``), or that
    it never answered. ``pid`` is ``None`` when the host refused to start any
    worker: a main program read from standard input, which workers cannot import.
    """

    def __init__(self, pid: int | None, exit_status: str, hint: str = "") -> None:
        self.pid = pid
        self.exit_status = exit_status
        if pid is None:  # refused before any worker was started
            super().__init__(f"worker processes cannot start ({exit_status}){hint}")
            return
        super().__init__(
            f"worker process pid {pid} could not start ({exit_status}); "
            f"its own traceback, if any, is on stderr{hint}"
        )


class DataDirLocked(SupervisorError, RuntimeError):
    """Another ``AgentHost`` owns the data directory: this one was not built.

    Two hosts on one directory would each resume and run the same sessions,
    and the last checkpoint written would silently win (acknowledged turns
    lost). The owner holds the directory's ``host.lock`` for its whole life;
    the kernel releases it when that process ends, however it ends, so this
    error always means a live process. Read-only tools may still open the
    store (``SQLiteCheckpointStore`` on its ``checkpoints.db``). ``pid``,
    ``hostname`` and ``started`` describe the owner (``None`` if it had not
    written them yet).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        pid: int | None,
        hostname: str | None = None,
        started: str | None = None,
    ) -> None:
        self.directory = os.fspath(directory)
        self.pid = pid
        self.hostname = hostname
        self.started = started
        since = "" if started is None else f", started {started}"
        if pid is None:
            owner = "another AgentHost (it has not written its pid yet)"
        elif pid == os.getpid() and hostname == socket.gethostname():
            owner = f"another AgentHost of this same process (pid {pid}{since})"
        else:
            where = "" if hostname is None else f" on host {hostname!r}"
            owner = f"another AgentHost (pid {pid}{where}{since})"
        super().__init__(
            f"data directory {self.directory!r} is in use by {owner}: stop that host "
            "(shutdown()), or use another data_dir; read-only tools may open its "
            "checkpoints.db directly with SQLiteCheckpointStore"
        )


class StoreCorrupted(SupervisorError):
    """The file where a checkpoint store is expected is not one: nothing was opened or changed.

    Raised instead of starting a new, empty store over lost data: the file is
    empty or missing although a store was created there (its marker file
    beside it says so), it is another program's SQLite database, or it is not
    a database at all. Differs from ``StoreUnavailable`` (the file may be fine
    but cannot be opened) and from ``actors.SnapshotDecodeError`` (one
    checkpoint inside a good store is damaged). ``path`` is the file and
    ``problem`` what is wrong with it.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"checkpoint store {self.path!r} {problem}; {fix}")


class StoreUnavailable(SupervisorError, OSError):
    """A checkpoint store's file cannot be opened or created where it is (a read-only
    directory or file system, missing permissions, a missing parent directory).

    Nothing is known to be wrong with the data: fix the access and open it
    again. Differs from ``StoreCorrupted`` (the file is not a store).
    ``path`` names the file; the SQLite or OS error is the ``__cause__``.
    """

    def __init__(
        self, path: str | os.PathLike[str], error: BaseException, what_to_do: str | None = None
    ) -> None:
        self.path = os.fspath(path)
        what_to_do = what_to_do or (
            "make its directory writable by this process (SQLite creates -wal and -shm "
            "files beside it), or choose another path or data_dir"
        )
        super().__init__(
            f"checkpoint store {self.path!r} cannot be opened or written ({error}); {what_to_do}"
        )


class StoreReadOnly(SupervisorError):
    """A checkpoint store opened with ``read_only=True`` was asked to write: nothing was
    changed.

    Raised by every method that writes (``save``, ``delete``, ``prune``,
    ``rotate_keys``), and by opening when opening would have to write: the file
    holds no store yet (creating it) or one of an older schema (migrating it).
    Open the store without ``read_only=True`` to write. ``path`` names the file;
    ``schema_version`` is the schema version the file holds when opening refused
    (0: no store yet), else ``None``. Differs from ``StoreUnavailable`` (the file
    cannot be opened or written at all).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        refused: str,
        fix: str,
        *,
        schema_version: int | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.schema_version = schema_version
        super().__init__(
            f"checkpoint store {self.path!r} was opened read_only=True: {refused}, and nothing "
            f"was changed; {fix}"
        )


class StoreFull(SupervisorError, OSError):
    """A checkpoint store has no room for a write: its disk is full, or the database
    reached a size limit of its own (SQLite's ``max_page_count``, PostgreSQL's
    ``disk_full``).

    Nothing of the failed operation was written, and what the store held before
    is intact. A save that raises it fails the turn it was saving (the session
    lives on, with the turn rolled back); every save that shared its transaction
    fails with it. Free space (or raise the limit) and retry. ``where`` names the
    store; the SQLite or driver error is the ``__cause__``.
    """

    def __init__(self, where: str, error: BaseException) -> None:
        self.where = where
        reported = str(error).partition("\n")[0]  # a server's CONTEXT lines stay in the cause
        super().__init__(
            f"checkpoint store {where} is full ({reported}): nothing of this write was stored, "
            "and what it held before is intact; free space on its disk (or raise the "
            "database's size limit), then retry"
        )


class StoreEncrypted(SupervisorError):
    """The checkpoint store is encrypted and was opened without keys (or written by a
    process that opened it before it was encrypted): nothing was read or written.

    Pass ``encryption=EncryptionKeys...`` holding its keys (``key_ids`` lists the
    ones the store records). Differs from ``EncryptionKeyError`` (keys were
    given, but not the right ones) and ``StoreNotEncrypted`` (the reverse).
    """

    def __init__(self, path: str | os.PathLike[str], key_ids: tuple[str, ...]) -> None:
        self.path = os.fspath(path)
        self.key_ids = key_ids
        names = ", ".join(repr(key_id) for key_id in key_ids) or "none recorded"
        super().__init__(
            f"checkpoint store {self.path!r} is encrypted (keys: {names}); open it with "
            "encryption=EncryptionKeys.from_env() (or another EncryptionKeys holding those "
            "keys), e.g. AgentHost(encryption=...)"
        )


class StoreNotEncrypted(SupervisorError):
    """Encryption was asked for, but the store already holds plaintext checkpoints:
    nothing was changed.

    A store becomes encrypted when it is first opened with keys while empty, or
    by the one-time migration ``SQLiteCheckpointStore.encrypt_existing(path,
    keys)`` (run it while no host uses the store). ``checkpoints`` is how many
    plaintext checkpoints were found. Differs from ``StoreEncrypted`` (the reverse).
    """

    def __init__(self, path: str | os.PathLike[str], checkpoints: int) -> None:
        self.path = os.fspath(path)
        self.checkpoints = checkpoints
        super().__init__(
            f"checkpoint store {self.path!r} holds {checkpoints} plaintext checkpoint(s) and is "
            "not encrypted; encrypt it once with SQLiteCheckpointStore.encrypt_existing(path, "
            "keys) while no host uses it, or open it without encryption"
        )


class EncryptionKeyError(SupervisorError):
    """The keys given cannot read the encrypted store: a key it needs is missing from the
    ring, or a key's bytes are not those the store recorded under its id.

    A configuration error, never damage: unlike ``actors.SnapshotDecodeError``
    it is not skipped for an older checkpoint (that would lose turns), so it
    reaches the caller. ``key_id`` names the key; put the right key back into
    the ring (old keys stay needed until ``rotate_keys()`` has re-encrypted
    every row under the current one).
    """

    def __init__(self, path: str | os.PathLike[str], key_id: str, problem: str) -> None:
        self.path = os.fspath(path)
        self.key_id = key_id
        self.problem = problem
        super().__init__(f"checkpoint store {self.path!r}: encryption key {key_id!r} {problem}")


class InvalidEncryptionKeys(SupervisorError, ValueError):
    """An ``EncryptionKeys`` could not be built: the keys given break a rule (no key, a
    key that is not 32 bytes, an id used twice, one key under two ids, a malformed
    ``SESSIONVISOR_KEYS`` entry). The message names the key id, never its bytes.
    """


class EncryptionUnavailable(SupervisorError, ImportError):
    """Encryption was asked for, but the ``cryptography`` package is not installed.

    Install the extra: ``pip install 'sessionvisor[encryption]'``. Nothing was opened.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(
            f"encryption at rest needs the 'cryptography' package ({error}); install it with "
            "pip install 'sessionvisor[encryption]'"
        )


class OwnershipLost(SupervisorError):
    """A save (or the start of an incarnation) found that this node no longer owns the
    session: another node claimed it (a newer epoch) or it was released.

    Nothing was stored. The node stops the session locally and does not resume
    it; the new owner resumes it from its last checkpoint, so a turn that raised
    this was not acknowledged: send it again, to the owner. Differs from
    ``SessionOwnedElsewhere`` (this node never owned the session) and
    ``NodeFenced`` (the node's own lease lapsed; no other owner needs to exist).
    """

    def __init__(self, session_id: str, node_id: str | None, epoch: int, detail: str) -> None:
        self.session_id = session_id
        self.node_id = node_id
        self.epoch = epoch
        who = "this process" if node_id is None else f"node {node_id!r}"
        super().__init__(
            f"session {session_id!r} is no longer owned by {who} (epoch {epoch}): {detail}; "
            "nothing was saved and the session was stopped here; send the turn again to its "
            "owner"
        )


class SessionOwnedElsewhere(SupervisorError):
    """The session is owned by another live node of the cluster: this node will not run it.

    ``node`` and ``address`` name the owner (the address as that node registered
    it); send the call there. A gateway forwards it instead of raising. The
    owner's lease lapses if it stops renewing its heartbeat, after which any node
    may claim the session. Differs from ``SessionNotFound`` (no node has it).
    """

    def __init__(self, session_id: str, node: str, address: str) -> None:
        self.session_id = session_id
        self.node = node
        self.address = address
        super().__init__(
            f"session {session_id!r} is owned by live node {node!r} at {address!r}; "
            "send the call to that node"
        )


class NodeFenced(SupervisorError):
    """This node accepts no turns: it could not renew its lease in time and has fenced
    itself until a renewal succeeds, or (``final``) it will never serve again: its lease
    lapsed and another process registered under its node id, or it was drained.

    Its sessions may be claimed by other nodes meanwhile; a save it still
    attempts for such a session is refused (``OwnershipLost``). Retry on
    another node; or here once the node has renewed (not ``final``), or once
    its process was restarted (``final``: it then registers anew). ``reason``
    says why.
    """

    def __init__(self, node_id: str, reason: str, *, final: bool = False) -> None:
        self.node_id = node_id
        self.reason = reason
        self.final = final
        then = (
            "it will not serve again: retry on another node, or restart this process (it "
            "registers as a new incarnation of the node id)"
            if final
            else "retry on another node, or here once it has renewed its lease"
        )
        super().__init__(f"node {node_id!r} is fenced and accepts no turns ({reason}); {then}")


class NodeIdInUse(SupervisorError, RuntimeError):
    """Another live process is registered under this node id (its heartbeat is fresh).

    Two processes under one id would each believe they own the id's sessions.
    Pick another ``node_id``, or stop that process; one killed without draining
    holds the id until its heartbeat is older than its TTL.
    """

    def __init__(self, node_id: str, address: str, ttl: float) -> None:
        self.node_id = node_id
        self.address = address
        self.ttl = ttl
        super().__init__(
            f"node id {node_id!r} is in use by a live process at {address!r}; stop it, or "
            f"use another node_id (a process that died without draining holds the id for "
            f"up to its TTL of {ttl} s)"
        )


class StoreUnreachable(SupervisorError, ConnectionError):
    """The database server could not be reached, or the connection broke during the
    operation (a server restart, a terminated backend, a network failure).

    For a ``save``, whether the checkpoint was stored is unknown: saving the
    same snapshot again is safe (a save is idempotent: the same checkpoint id
    replaces its rows). Nothing is known to be wrong with the data. ``where``
    names the server (without password); the driver's error is the ``__cause__``.
    """

    def __init__(self, where: str, action: str, error: BaseException) -> None:
        self.where = where
        self.action = action
        super().__init__(
            f"checkpoint database {where} unreachable during {action} ({error}); check that "
            "the server runs and accepts connections, then retry (a save may be retried "
            "as it is: it is idempotent)"
        )


class StoreBusy(SupervisorError, TimeoutError):
    """The database server answered, but the operation waited past the store's
    ``transaction_timeout`` for a lock another connection held (a slow or frozen
    writer of the same session, a migration, an administrator's ``LOCK TABLE``),
    and the server cancelled it.

    Nothing was written: the transaction was rolled back, so retrying the same
    save is safe. ``where`` names the server (without password); the driver's
    error is the ``__cause__``.
    """

    def __init__(self, where: str, action: str, error: BaseException) -> None:
        self.where = where
        self.action = action
        super().__init__(
            f"checkpoint database {where} cancelled {action}: it waited too long for a "
            f"lock another connection holds ({error}); nothing was written. Retry it; if "
            "this persists, look for a long transaction in pg_stat_activity"
        )


for _cls in (
    SupervisorError,
    HostShutDown,
    CallAborted,
    OwnershipLost,
    SessionOwnedElsewhere,
    NodeFenced,
    NodeIdInUse,
    StoreUnreachable,
    StoreBusy,
    StoreCorrupted,
    StoreUnavailable,
    StoreReadOnly,
    StoreFull,
    StoreEncrypted,
    StoreNotEncrypted,
    EncryptionKeyError,
    InvalidEncryptionKeys,
    EncryptionUnavailable,
    DataDirLocked,
    SessionAlreadyExists,
    SessionNotFound,
    CheckpointNotFound,
    SnapshotTooLarge,
    ChildStartError,
    CredentialsUnavailable,
    ChildAlreadyExists,
    ChildNotFound,
    RestartIntensityExceeded,
    Killed,
    SessionCrashed,
    SessionFailed,
    WorkerCrashed,
    RemoteError,
    TemplateNotPicklable,
    TemplateNotLoadable,
    WorkerStartError,
):
    _cls.__module__ = "supervisor"
