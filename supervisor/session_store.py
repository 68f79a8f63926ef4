"""``SessionStore``: the registry of live sessions (``CMDCGateway.SessionStore`` in Python).

Maps a session id to its actor and metadata, with indexes by tenant and by API
key fingerprint, and evicts an entry as soon as its actor dies:

* Every registered actor is monitored in the *early* phase (``monitor(...,
  early=True)``): the entry is removed on the dying actor's thread before any
  ordinary watcher (its supervisor, a host) receives ``Down``, so a watcher that
  looks the session up on ``Down`` never finds the dead ref.
* Between the moment an actor stops and its Down notices, lookups check
  liveness: ``get``/``list*`` never return a dead ref; they evict it on the spot.
* The raw API key is never stored: only ``HMAC-SHA256(secret, key)`` with a
  per-store secret, compared in constant time.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

import pykka

from supervisor._lifecycle import Down, ExitReason, MonitorRef, lifecycle_of
from supervisor._session_attrs import PluginSpec, SessionAttrs, validate
from supervisor.errors import SessionAlreadyExists, SessionNotFound
from supervisor.monitors import _not_supervised_message, demonitor

__all__ = ["EvictCallback", "SessionEntry", "SessionStore"]

logger = logging.getLogger("supervisor")

EvictCallback = Callable[["SessionEntry", ExitReason], object]
"""Called once per entry evicted because its actor died, with the actor's exit reason."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """One registered session's metadata (the seed's ``session_metadata``). Thread-safe (frozen).

    The raw API key is not here: only its keyed fingerprint (see
    ``SessionStore.api_key_matches``).

    Attributes:
        session_id: The unique id.
        actor_ref: The session's actor (alive when the entry was returned).
        tenant_id: Tenant, ``"default"`` unless given.
        api_key_fingerprint: Hex HMAC-SHA256 of the API key under the store's secret, or None.
        monitor_ref: The store's monitor on the actor.
        created_at: Registration time, milliseconds since the Unix epoch.
        blueprint, model, working_dir, group_id: Optional descriptive strings.
        event_buffer_size: Events the session buffers (>= 0).
        hibernate_after_ms: Idle time before hibernation (>= 1), or None.
        max_steering_queue: Steering queue bound (>= 1), or None.
        plugins: Plugin names or ``(name, read-only options)`` pairs.
    """

    session_id: str
    actor_ref: pykka.ActorRef[Any]
    tenant_id: str
    api_key_fingerprint: str | None = field(repr=False)
    monitor_ref: MonitorRef = field(repr=False)
    created_at: int
    blueprint: str | None
    model: str | None
    working_dir: str | None
    group_id: str | None
    event_buffer_size: int
    hibernate_after_ms: int | None
    max_steering_queue: int | None
    plugins: tuple[PluginSpec, ...]


class SessionStore:
    """Registry of live sessions with tenant and API-key indexes and automatic eviction.

    Thread-safe: one lock guards the entries and both indexes; it is never held
    while user code (``on_evict``, watchers) runs. Every query costs time
    proportional to its result (``list()`` to the number of sessions).

    Args:
        secret: Key of the API-key fingerprints (>= 16 bytes); random per store if None.
        on_evict: Called once for each entry evicted because its actor died, with
            the entry and the exit reason. Runs on the dying actor's thread, after
            the entry is gone and before the actor's ordinary watchers get
            ``Down``; what it raises is logged and ignored. Not called for
            ``delete``. Keep it short: it delays the actor's other watchers.
        clock_ms: Wall-clock milliseconds for ``created_at`` (injectable for tests).
    """

    def __init__(
        self,
        *,
        secret: bytes | None = None,
        on_evict: EvictCallback | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)
        if not isinstance(secret, bytes):
            msg = f"secret must be bytes, got {type(secret).__name__}"
            raise TypeError(msg)
        if len(secret) < 16:
            msg = f"secret must be at least 16 bytes, got {len(secret)}"
            raise ValueError(msg)
        if on_evict is not None and not callable(on_evict):
            msg = f"on_evict must be callable or None, got {on_evict!r}"
            raise TypeError(msg)
        self._secret = secret
        self._on_evict = on_evict
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._entries: dict[str, SessionEntry] = {}
        self._by_tenant: dict[str, dict[str, None]] = {}
        self._by_fingerprint: dict[str, dict[str, None]] = {}
        # Entries evicted on the spot by a liveness check, awaiting their Down.
        self._dying: dict[MonitorRef, SessionEntry] = {}

    def fingerprint(self, api_key: str) -> str:
        """The hex HMAC-SHA256 of ``api_key`` under this store's secret. Thread-safe."""
        if not isinstance(api_key, str):
            msg = f"api_key must be a str, got {type(api_key).__name__}"
            raise TypeError(msg)
        return hmac.new(self._secret, api_key.encode(), hashlib.sha256).hexdigest()

    # -- writes ----------------------------------------------------------------

    def create(
        self,
        session_id: str,
        actor_ref: pykka.ActorRef[Any],
        *,
        api_key_fingerprint: str | None = None,
        **attrs: Unpack[SessionAttrs],
    ) -> SessionEntry:
        """Register a live session and start monitoring its actor.

        Args:
            session_id: Unique, non-empty id. An id whose actor has died counts as free.
            actor_ref: Ref of a live :class:`~supervisor.SupervisedActor`.
            **attrs: The seed's metadata: ``api_key``, ``tenant_id`` (default
                ``"default"``), ``blueprint``, ``model``, ``working_dir``, ``group_id``,
                ``event_buffer_size`` (default 1000), ``hibernate_after_ms``,
                ``max_steering_queue``, ``plugins``.
            api_key_fingerprint: Instead of ``api_key``: a fingerprint this store
                made earlier (``fingerprint()``), for a host re-registering a
                session whose raw key it deliberately did not keep.

        Returns:
            The new entry.

        Raises:
            SessionAlreadyExists: a live session already has this id.
            TypeError: unknown attribute, wrong value type, or not a SupervisedActor ref.
            ValueError: a value that breaks its rule (empty string, size < 1).
            pykka.ActorDeadError: the actor is not alive.
        """
        if not isinstance(session_id, str) or not session_id:
            msg = f"session_id must be a non-empty str, got {session_id!r}"
            raise (ValueError if isinstance(session_id, str) else TypeError)(msg)
        values = validate(attrs)
        api_key = values.pop("api_key")
        if api_key is not None and api_key_fingerprint is not None:
            msg = "pass api_key or api_key_fingerprint, not both"
            raise TypeError(msg)
        fingerprint = api_key_fingerprint if api_key is None else self.fingerprint(api_key)
        lifecycle = lifecycle_of(actor_ref)
        if lifecycle is None:
            raise TypeError(_not_supervised_message(actor_ref))
        if not actor_ref.is_alive():
            msg = f"cannot register session {session_id!r}: {actor_ref} is not alive"
            raise pykka.ActorDeadError(msg)
        notify = functools.partial(self._on_down, session_id)
        with self._lock:
            existing = self._entries.get(session_id)
            if existing is not None:
                if existing.actor_ref.is_alive():
                    raise SessionAlreadyExists(session_id)
                self._evict_locked(existing)
            mref, added = lifecycle.watch(actor_ref, notify, early=True)
            if not added:
                msg = f"cannot register session {session_id!r}: {actor_ref} has exited"
                raise pykka.ActorDeadError(msg)
            entry = SessionEntry(
                session_id=session_id,
                actor_ref=actor_ref,
                api_key_fingerprint=fingerprint,
                monitor_ref=mref,
                created_at=self._clock_ms(),
                **values,
            )
            self._entries[session_id] = entry
            self._by_tenant.setdefault(entry.tenant_id, {})[session_id] = None
            if fingerprint is not None:
                self._by_fingerprint.setdefault(fingerprint, {})[session_id] = None
        return entry

    def delete(self, session_id: str) -> None:
        """Remove a session and cancel its monitor; no eviction callback. Idempotent."""
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None:
                return
            self._unlink_locked(entry)
        demonitor(entry.monitor_ref)

    # -- reads -----------------------------------------------------------------

    def get(self, session_id: str) -> SessionEntry:
        """The entry of a live session.

        Raises:
            SessionNotFound: never registered, deleted, or its actor has died
                (even if its eviction has not run yet: then it is evicted now).
        """
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is not None:
                if entry.actor_ref.is_alive():
                    return entry
                self._evict_locked(entry)
        raise SessionNotFound(session_id)

    def list(self) -> builtins.list[SessionEntry]:
        """All live sessions, in registration order."""
        with self._lock:
            return self._live_locked(builtins.list(self._entries.values()))

    def count(self) -> int:
        """Number of registered sessions.

        An actor that has just died is counted until its eviction, which runs on
        its own thread right after it stops (``get``/``list`` already skip it).
        """
        return len(self._entries)

    def list_by_tenant(self, tenant_id: str) -> builtins.list[SessionEntry]:
        """Live sessions of one tenant, in registration order (cost: the result size)."""
        with self._lock:
            ids = self._by_tenant.get(tenant_id, {})
            return self._live_locked([self._entries[sid] for sid in ids])

    def list_by_api_key(self, api_key: str) -> builtins.list[SessionEntry]:
        """Live sessions created with this raw API key (cost: the result size)."""
        fingerprint = self.fingerprint(api_key)
        with self._lock:
            ids = self._by_fingerprint.get(fingerprint, {})
            candidates = [self._entries[sid] for sid in ids]
            matching = [
                e
                for e in candidates
                if e.api_key_fingerprint is not None
                and hmac.compare_digest(e.api_key_fingerprint, fingerprint)
            ]
            return self._live_locked(matching)

    def api_key_matches(self, session_id: str, api_key: str) -> bool:
        """Whether ``api_key`` is the key the live session was created with (constant time).

        Raises:
            SessionNotFound: as ``get``.
        """
        entry = self.get(session_id)
        expected = entry.api_key_fingerprint or ""
        return hmac.compare_digest(expected, self.fingerprint(api_key)) and bool(expected)

    # -- eviction --------------------------------------------------------------

    def _on_down(self, session_id: str, down: Down) -> None:
        """Early watcher: runs on the dying actor's thread before its ordinary watchers."""
        with self._lock:
            entry = self._dying.pop(down.ref, None)
            if entry is None:
                current = self._entries.get(session_id)
                if current is None or current.monitor_ref is not down.ref:
                    return  # deleted (or replaced) before it died
                self._unlink_locked(current)
                entry = current
        if self._on_evict is not None:
            try:
                self._on_evict(entry, down.reason)
            except Exception:
                logger.exception("SessionStore on_evict raised for %r; ignored", entry.session_id)

    def _evict_locked(self, entry: SessionEntry) -> None:
        """Drop a dead actor's entry now; its Down (still coming) fires ``on_evict``."""
        self._unlink_locked(entry)
        self._dying[entry.monitor_ref] = entry

    def _unlink_locked(self, entry: SessionEntry) -> None:
        sid = entry.session_id
        del self._entries[sid]
        _discard(self._by_tenant, entry.tenant_id, sid)
        if entry.api_key_fingerprint is not None:
            _discard(self._by_fingerprint, entry.api_key_fingerprint, sid)

    def _live_locked(self, entries: Sequence[SessionEntry]) -> builtins.list[SessionEntry]:
        live = []
        for entry in entries:
            if entry.actor_ref.is_alive():
                live.append(entry)
            else:
                self._evict_locked(entry)
        return live

    def _check_consistency(self) -> None:
        """Assert that both indexes agree with the entries (for tests). Thread-safe."""
        with self._lock:
            by_tenant = _invert(self._entries.values(), lambda e: e.tenant_id)
            by_fp = _invert(self._entries.values(), lambda e: e.api_key_fingerprint)
            by_fp.pop(None, None)
            assert by_tenant == _as_sets(self._by_tenant), "tenant index disagrees"
            assert by_fp == _as_sets(self._by_fingerprint), "api-key index disagrees"
            assert all(sid == e.session_id for sid, e in self._entries.items())

    def __repr__(self) -> str:
        return f"<SessionStore with {len(self._entries)} sessions>"


def _discard(index: dict[str, dict[str, None]], key: str, session_id: str) -> None:
    bucket = index.get(key)
    if bucket is not None:
        bucket.pop(session_id, None)
        if not bucket:
            del index[key]


def _invert(
    entries: Iterable[SessionEntry], key: Callable[[SessionEntry], str | None]
) -> dict[str | None, set[str]]:
    out: dict[str | None, set[str]] = {}
    for entry in entries:
        out.setdefault(key(entry), set()).add(entry.session_id)
    return out


def _as_sets(index: Mapping[str, Mapping[str, None]]) -> dict[str | None, set[str]]:
    return {key: set(bucket) for key, bucket in index.items()}


for _cls in (SessionEntry, SessionStore):
    _cls.__module__ = "supervisor"
