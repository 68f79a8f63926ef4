"""``NodeConfig``: how a host takes part in a cluster, validated once."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from actors import AgentTemplate

__all__ = ["MAX_TTL", "MIN_TTL", "NodeConfig", "NodeConfigError", "TemplateChoice"]

MIN_TTL = 0.1
"""The shortest ``NodeConfig.ttl`` (seconds): a heartbeat is a database round trip."""
MAX_TTL = 86400.0
"""The longest ``NodeConfig.ttl`` and ``sweep_interval`` (seconds): one day."""
_INT4_MAX = 2**31 - 1
_NODE_ID = re.compile(r"[!-~]{1,255}")
"""Printable ASCII without spaces (``!`` to ``~``), 1 to 255 characters."""

TemplateChoice = AgentTemplate | Callable[[str], AgentTemplate | None]
"""One template for every session, or a function of the session id returning one (or
``None``: this node does not take that session over by itself)."""


class NodeConfigError(ValueError):
    """A ``NodeConfig`` field holds what no cluster node can use; the message says what
    is wrong and what to give instead.

    A ``ValueError`` (a field of the wrong type raises ``NodeConfigTypeError``, a
    ``TypeError`` too), so code catching those goes on working; ``field`` names the
    field, so a caller (``sessionvisor serve``) can point at the option that set it
    without reading the message.

    Attributes:
        field: The ``NodeConfig`` field refused (``"node_id"``, ``"ttl"``, ...).
    """

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name

    def __reduce__(self) -> tuple[type[NodeConfigError], tuple[str, str]]:
        return type(self), (self.field, str(self))  # pickled with its field


class NodeConfigTypeError(NodeConfigError, TypeError):
    """A ``NodeConfig`` field of the wrong type (``NodeConfigError`` says which)."""


@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    """One node of a cluster of hosts sharing a ``PostgresCheckpointStore``. Immutable, so
    thread-safe (``template`` and ``clock`` are called from the node's threads).

    Attributes:
        node_id: The node's name, unique among live nodes (a restarted node may
            reuse it: it becomes a new incarnation, and its old incarnation's
            sessions are claimed at once). 1 to 255 printable ASCII characters
            without spaces: it travels in HTTP headers between gateways.
        address: Where clients reach this node (its gateway's URL); reported by
            ``SessionOwnedElsewhere`` to callers on other nodes.
        ttl: Seconds without a heartbeat after which the node counts as dead and
            its sessions may be claimed by other nodes. The heartbeat (one UPDATE)
            runs every ``ttl / 3``. From ``MIN_TTL`` (0.1) to ``MAX_TTL`` (one day).
        margin: The node stops accepting turns (fences itself) when it has not
            renewed its heartbeat for ``ttl - margin`` seconds on its own monotonic
            clock, before any other node may claim its sessions. Default ``ttl / 4``.
        template: What sessions this node takes over run on: orphans of dead nodes
            (its sweeper resumes them) and sessions asked for here that no live node
            owns. ``None``: this node takes over nothing by itself.
        sweep_interval: Seconds between two sweeps for orphaned sessions (default
            ``ttl / 4``, at most ``MAX_TTL``); the sweep claims them in batches of
            ``sweep_batch`` (at most 2**31 - 1).
        clock: Monotonic seconds for the self-fence (injectable for tests).
        events: How the node fans its sessions' events out to other nodes
            (``cluster.ClusterEvents``): ``"postgres"`` (LISTEN/NOTIFY on the store's
            database, the default), a ``redis://`` or ``rediss://`` URL (Pub/Sub there;
            needs the ``[redis]`` extra), or ``None`` (no fan-out: events stay on the
            owner, and a new owner numbers on from the last checkpoint's mark only).
    """

    node_id: str
    address: str = ""
    ttl: float = 10.0
    margin: float | None = None
    template: TemplateChoice | None = field(default=None, repr=False)
    sweep_interval: float | None = None
    sweep_batch: int = 100
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    events: str | None = "postgres"

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, str) or not self.node_id:
            raise NodeConfigError(
                "node_id", f"node_id must be a non-empty str, got {self.node_id!r}"
            )
        if not isinstance(self.address, str):
            raise NodeConfigTypeError(
                "address", f"address must be a str, got {type(self.address).__name__}"
            )
        if not _positive(self.ttl):
            raise NodeConfigError(
                "ttl", f"ttl must be a positive number of seconds, got {self.ttl!r}"
            )
        if not MIN_TTL <= self.ttl <= MAX_TTL:
            # Shorter: a heartbeat (a database round trip) every ttl / 3 cannot keep up, and
            # the nodes fence themselves. Longer: a dead node's sessions wait that long for
            # a new owner, and the waits overflow the platform's timeouts.
            raise NodeConfigError(
                "ttl",
                f"ttl must be between {MIN_TTL:g} and {MAX_TTL:g} seconds, got {self.ttl!r}: "
                "a node renews every ttl / 3 and a dead node's sessions move after ttl; "
                "a few seconds to a minute suits most clusters",
            )
        if self.margin is not None and not (_positive(self.margin) and self.margin < self.ttl):
            raise NodeConfigError(
                "margin", f"margin must be > 0 and < ttl ({self.ttl}), got {self.margin!r}"
            )
        if self.fence_after <= self.heartbeat_interval:
            # Else the node fences itself (refusing turns) between two heartbeats, every time.
            raise NodeConfigError(
                "margin",
                f"margin must be < 2/3 of ttl ({self.ttl * 2 / 3:g} s for ttl {self.ttl}), got "
                f"{self.margin!r}: the node fences itself ttl - margin seconds after its last "
                f"renewal and renews every ttl / 3 ({self.heartbeat_interval:g} s), so a larger "
                "margin fences it between every two heartbeats",
            )
        for name, text in (("node_id", self.node_id), ("address", self.address)):
            if "\x00" in text:  # PostgreSQL text cannot store it
                raise NodeConfigError(
                    name, f"{name} must not hold a NUL character ('\\x00'), got {text!r}"
                )
        if not _NODE_ID.fullmatch(self.node_id):
            # Gateways send it in HTTP headers (ASCII; a line break would end the header).
            raise NodeConfigError(
                "node_id",
                "node_id must be 1 to 255 printable ASCII characters without spaces (it is "
                f"sent in HTTP headers between nodes), got {self.node_id[:80]!r}; e.g. "
                "node-1, or the host name",
            )
        interval = self.sweep_interval
        if interval is not None and not (_positive(interval) and interval <= MAX_TTL):
            raise NodeConfigError(
                "sweep_interval",
                f"sweep_interval must be > 0 and at most {MAX_TTL:g} seconds, got {interval!r}",
            )
        batch = self.sweep_batch
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= _INT4_MAX:
            # It is the LIMIT of the sweep's statement; below 1 nothing would be taken over.
            raise NodeConfigError(
                "sweep_batch",
                f"sweep_batch must be an int >= 1 and at most {_INT4_MAX} (the sessions one "
                f"sweep statement claims), got {batch!r}",
            )
        events = self.events
        if events is not None and not (
            events == "postgres"
            or (isinstance(events, str) and events.startswith(("redis://", "rediss://")))
        ):
            raise NodeConfigError(
                "events", f"events must be 'postgres', a redis:// URL or None, got {events!r}"
            )
        template = self.template
        if template is not None and not (isinstance(template, AgentTemplate) or callable(template)):
            raise NodeConfigTypeError(
                "template",
                "template must be an AgentTemplate or a function of the session id, got "
                f"{type(template).__name__}",
            )

    @property
    def fence_after(self) -> float:
        """Seconds without a renewal after which the node fences itself."""
        return self.ttl - (self.ttl / 4 if self.margin is None else self.margin)

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between two heartbeats."""
        return self.ttl / 3

    @property
    def sweep_every(self) -> float:
        """Seconds between two sweeps."""
        return self.ttl / 4 if self.sweep_interval is None else self.sweep_interval

    def template_for(self, session_id: str) -> AgentTemplate | None:
        """The template a session taken over here runs on, or ``None``."""
        template = self.template
        if template is None or isinstance(template, AgentTemplate):
            return template
        return template(session_id)


def _positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


for _cls in (NodeConfig, NodeConfigError, NodeConfigTypeError):
    _cls.__module__ = "supervisor.cluster"
