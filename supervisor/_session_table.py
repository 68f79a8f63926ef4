"""``SessionTable``: an ``AgentHost``'s records of its sessions, by id and by tenant.

A record outlives its session's actors (see ``SessionRecord``), so the table
holds hibernated and failed sessions too. It also knows whether the host is
closed: once ``close`` has run, nothing new is added.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pykka

from actors import AgentTemplate, Event, Snapshot
from supervisor._checkpoints import SaveOrder
from supervisor._host_record import SessionRecord, SessionStatus
from supervisor._session_attrs import validate
from supervisor.errors import HostShutDown, SessionAlreadyExists, SessionNotFound

__all__ = ["SessionTable", "require_session_id", "require_tenant", "require_tenant_arg"]

_SHARED_ATTR_SETS = 1024  # distinct attribute dicts shared between records, at most


def require_session_id(session_id: object) -> None:
    """Refuse, at the call, a session id that is not a ``str`` (no session has it: the
    caller's mistake, not a missing session).

    Raises:
        TypeError: it is not a ``str`` (the message names the argument).
    """
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")


def require_tenant_arg(tenant_id: object) -> None:
    """Refuse, at the call, a ``tenant_id`` argument that is neither ``None`` nor a ``str``
    (it matched no tenant, and the call answered ``SessionNotFound`` or nothing).

    Raises:
        TypeError: it is neither (the message names the argument).
    """
    if tenant_id is not None and not isinstance(tenant_id, str):
        raise TypeError(f"tenant_id must be a str or None, got {type(tenant_id).__name__}")


def require_tenant(session_id: str, owner: str, tenant_id: str | None) -> None:
    """The tenant guard of every host call that names a session: the one rule, kept here.

    A caller that names a tenant (``tenant_id`` not ``None``) reaches only the
    sessions of that tenant (``owner``); for any other the answer is the one a
    missing session gets, so a session's existence does not leak across tenants.

    Raises:
        SessionNotFound: ``tenant_id`` is given and is not ``owner``.
    """
    if tenant_id is not None and tenant_id != owner:
        require_tenant_arg(tenant_id)
        raise SessionNotFound(session_id)


class SessionTable:
    """The records of one host. Thread-safe.

    One lock guards the id and tenant indexes and the closed flag; the
    ``changed`` condition guards every record's ``status`` and ``ref`` and is
    notified whenever one changes (``set``), so callers can wait for a session
    to come back. ``on_missing``, set once by the host before use, is asked for a
    session the table does not have (a cluster node may take it over).
    """

    def __init__(self) -> None:
        self._records: dict[str, SessionRecord] = {}
        self._by_tenant: dict[str, dict[str, None]] = {}
        self._attr_dicts: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.changed = threading.Condition()
        # Guarded by ``changed``: who waits for a record to be stopped (``when_stopped``).
        self._stop_watchers: dict[SessionRecord, list[Callable[[], None]]] = {}
        self._stops_ended = False  # guarded by ``changed``: the shutdown called them all
        self.closed = False
        self.on_missing: Callable[[str], SessionRecord | None] | None = None
        self._taps: tuple[Callable[[SessionRecord, Event], None], ...] = ()
        # One per session id while any record of it lives: a call still holding a stopped
        # record (a checkpoint() copying its latest) orders its save with the new record's.
        self._save_orders: weakref.WeakValueDictionary[str, SaveOrder] = (
            weakref.WeakValueDictionary()
        )

    def tap(self, tap: Callable[[SessionRecord, Event], None]) -> None:
        """Call ``tap(record, event)`` for every event of every session, present and to
        come, for as long as the host lives (metrics). On the publishing thread: it must
        not block; one that raises is logged and skipped, as any event subscriber."""
        with self._lock:
            self._taps = (*self._taps, tap)
            records = list(self._records.values())
        for record in records:  # a record added from now on is tapped by ``add``
            record.events.subscribe(functools.partial(tap, record), quick=True)

    def check_open(self) -> None:
        """Raise ``HostShutDown`` (a ``RuntimeError``) once the host is shut down."""
        if self.closed:
            raise HostShutDown

    def add(self, record: SessionRecord) -> None:
        """Add a new record, replacing a failed one of the same id (whose ``when_stopped``
        watchers are called: it is gone for good).

        Raises:
            SessionAlreadyExists: a record of that id is live or hibernated.
            RuntimeError: the host is shut down.
        """
        with self._lock:
            self.check_open()
            existing = self._records.get(record.session_id)
            if existing is not None and existing.status != "failed":
                raise _already_exists(existing)
            if existing is not None:
                self._unindex(existing)
            self._records[record.session_id] = record
            self._by_tenant.setdefault(record.tenant_id, {})[record.session_id] = None
            for tap in self._taps:
                record.events.subscribe(functools.partial(tap, record), quick=True)
        if existing is not None:  # its watchers (event streams) end: it is gone for good
            self._call_stop_watchers(existing)

    def create(
        self,
        session_id: str,
        template: AgentTemplate,
        tenant_id: str,
        api_key: str | None,
        attrs: dict[str, Any],
        *,
        fingerprint: Callable[[str], str],
        saved_fingerprint: str | None = None,
        hibernate_after_ms: int | None,
        resume_from: Snapshot | None = None,
    ) -> SessionRecord:
        """Validate a new session's attributes, build its record and ``add`` it.

        ``model`` and ``plugins`` default to the template's; the API key is kept
        only as its ``fingerprint`` (without a key, the ``saved_fingerprint`` of
        the checkpoint it resumes, if any); ``hibernate_after_ms`` is the host's
        default, which the session's own attribute overrides.

        Raises:
            TypeError, ValueError: an invalid id, template or attribute (named).
            SessionAlreadyExists, RuntimeError: as ``add``.
        """
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
        if not isinstance(template, AgentTemplate):
            raise TypeError(f"template must be an actors.AgentTemplate, got {template!r}")
        attrs.setdefault("model", template.model_string)
        attrs.setdefault("plugins", [p.name for p in template.plugins])
        validate({**attrs, "tenant_id": tenant_id, "api_key": api_key})
        attrs = self.shared_attrs(attrs)
        own_limit = attrs.get("hibernate_after_ms") or hibernate_after_ms
        record = SessionRecord(
            session_id,
            template,
            tenant_id=tenant_id,
            fingerprint=saved_fingerprint if api_key is None else fingerprint(api_key),
            attrs=attrs,
            created_at=int(time.time() * 1000),
            hibernate_after=None if own_limit is None else own_limit / 1000,
            resume_from=resume_from,
            save_order=self._save_order(session_id),
        )
        self.add(record)
        return record

    def _save_order(self, session_id: str) -> SaveOrder:
        """The ``SaveOrder`` of ``session_id``'s records: a live one's, or a new one."""
        with self._lock:
            order = self._save_orders.get(session_id)
            if order is None:
                order = self._save_orders[session_id] = SaveOrder()
            return order

    def get(self, session_id: str) -> SessionRecord | None:
        """The record of ``session_id``, stopped or not, or ``None``."""
        with self._lock:
            return self._records.get(session_id)

    def live(self, session_id: str, tenant_id: str | None = None) -> SessionRecord:
        """The record of a session the host still has (not stopped), of tenant ``tenant_id``
        when one is given (see ``require_tenant``).

        Raises:
            TypeError: ``session_id`` is not a ``str``.
            SessionNotFound: no such session (for that tenant).
            HostShutDown: none, and the host is shut down (a shutdown stops every session).
            SessionOwnedElsewhere: (a cluster node) a live other node owns it.
        """
        # Without the lock: one dict lookup is atomic, and this runs on every call.
        if tenant_id is not None and type(tenant_id) is not str:
            require_tenant_arg(tenant_id)
        try:
            record = self._records.get(session_id)
        except TypeError:  # unhashable: a list, a dict
            record = None
        if record is None:
            require_session_id(session_id)
        if record is None or record.status == "stopped":
            self.check_open()  # a shutdown stops every session; their checkpoints stand
            if self.on_missing is not None:
                record = self.on_missing(session_id)
        if record is None or record.status == "stopped":
            raise SessionNotFound(session_id)
        require_tenant(session_id, record.tenant_id, tenant_id)
        return record

    def check_absent(self, session_id: str, tenant_id: str | None = None) -> None:
        """Refuse, before anything is loaded, a ``resume`` of a session that runs here.

        Checked again by ``add``; this earlier check matters because a resume loads
        the checkpoint first: had the running session served more turns and been
        stopped before ``add``, the resume would start from the older checkpoint and
        its next one would drop turns whose answers were already given.

        Raises:
            SessionNotFound: it runs here for another tenant than ``tenant_id`` (given).
            SessionAlreadyExists: it is live or hibernated here.
        """
        existing = self._records.get(session_id)  # one dict lookup: atomic
        if existing is not None and existing.status not in ("stopped", "failed"):
            require_tenant(session_id, existing.tenant_id, tenant_id)
            raise _already_exists(existing)

    def check_current(self, record: SessionRecord) -> None:
        """Make sure ``record`` is still the live record of its session, for a call that
        looked it up and then waited for its gate: another call may have stopped it
        meanwhile, and a ``resume`` started a new session of that id, which acting on the
        old record would stop (the supervisor knows its sessions by id).

        Raises:
            SessionNotFound: the session was stopped (or replaced) meanwhile.
        """
        with self._lock:
            current = self._records.get(record.session_id) is record
        if not current or record.status == "stopped":
            raise SessionNotFound(record.session_id)

    def records(self, tenant_id: str | None = None) -> list[SessionRecord]:
        """Every record (of one tenant), in the order they were added.

        Raises:
            TypeError: ``tenant_id`` is neither ``None`` nor a ``str``.
        """
        require_tenant_arg(tenant_id)
        with self._lock:
            if tenant_id is None:
                return list(self._records.values())
            return [self._records[s] for s in self._by_tenant.get(tenant_id, ())]

    def forget(self, record: SessionRecord, last_event: Callable[[], None] | None = None) -> None:
        """Drop ``record`` (if it is still the one of its id), then call its ``when_stopped``
        watchers: a stop (``stop_session``, a move) ends here, its incarnation gone.

        ``last_event``, if given, runs between the two: the stop's own last event (a
        move's ``moved``), published once the id is free here, and before the session's
        event streams end, so they hand it out as their last.
        """
        with self._lock:
            if self._records.get(record.session_id) is record:
                del self._records[record.session_id]
                self._unindex(record)
        with self.changed:  # wakes ``await_stop``
            self.changed.notify_all()
        try:
            if last_event is not None:
                last_event()
        finally:  # one that failed to start is never stopped: its watchers are called here
            self._call_stop_watchers(record)

    def await_stop(self, session_id: str, timeout: float) -> None:
        """Wait (up to ``timeout``) until a stop of ``session_id`` that is under way is over:
        its record forgotten, its incarnation ended and its ownership released. A new
        session of that id (a start or a resume) waits for it, or that stop would end it;
        returns at once when no stop is under way.

        Raises:
            SessionAlreadyExists: the stop was not over within ``timeout``.
            HostShutDown: the host is shut down (its stops never end in a forget).
        """
        if not isinstance(session_id, str):
            return  # not a session's id: ``create`` names what is wrong with it
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                self.check_open()
                record = self._records.get(session_id)
                if record is None or record.status != "stopped":
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _already_exists(record)
                self.changed.wait(remaining)

    def _call_stop_watchers(self, record: SessionRecord) -> None:
        with self.changed:
            watchers = self._stop_watchers.pop(record, ())
        for watcher in watchers:
            watcher()

    def close(self) -> list[SessionRecord] | None:
        """Mark the host closed; its records, or ``None`` if it already was."""
        with self._lock:
            if self.closed:
                return None
            self.closed = True
            return list(self._records.values())

    def set(
        self, record: SessionRecord, status: SessionStatus, ref: pykka.ActorRef[Any] | None
    ) -> bool:
        """Change a record's status and actor, waking whoever waits on ``changed``.

        ``stopped`` is final: a session that is started again gets a new record. An
        incarnation that registers after its session was stopped (a restart or a
        start that the stop raced, which the stop then terminates) leaves it stopped,
        so the calls still holding the record learn at once that it is gone, instead
        of waiting ``restart_wait`` for a restart that never comes.

        A stop's ``when_stopped`` watchers (event streams, which end once they read what
        the session published) are called by the ``forget`` that ends it, once its
        incarnation is gone and its last events (a plugin's failing ``session_end``, a
        move's ``moved``) are out: called here, they ended streams before those. A
        shutdown's stops never end in a ``forget``: it calls them (``end_stops``) once it
        has stopped the sessions' copies.

        Returns False if the record was stopped already: of two threads stopping it at
        once, one only is told it stopped it (the look and the change are one step).
        """
        with self.changed:
            was_stopped = record.status == "stopped"
            if was_stopped and status != "stopped":
                return False
            record.status = status
            record.ref = ref
            self.changed.notify_all()
        return not was_stopped

    def end_stops(self) -> None:
        """Call every record's ``when_stopped`` watchers (the host's shutdown, once it
        has stopped the sessions' copies, or given up on them: their last events, a
        plugin's failing ``session_end``, are out by then); from now on a new watcher is
        called at once. Each watcher is called once: a second call calls none."""
        with self.changed:
            self._stops_ended = True
            watchers = [w for ws in self._stop_watchers.values() for w in ws]
            self._stop_watchers.clear()
        for watcher in watchers:
            watcher()

    def when_stopped(
        self, record: SessionRecord, watcher: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``watcher`` once, on the stopping thread, when ``record`` is stopped
        (``stop_session``, a move or shutdown: once the stop is over, see ``set`` and
        ``end_stops``) or forgotten; at once if that stop is over already. It must be
        quick and not raise. Returns a function that withdraws it."""
        with self.changed:
            if not self._stop_over(record):
                self._stop_watchers.setdefault(record, []).append(watcher)
                return functools.partial(self._unwatch, record, watcher)
        watcher()
        return _nothing

    def _stop_over(self, record: SessionRecord) -> bool:
        """Whether ``record``'s stop watchers were called: it is stopped and the stop's
        ``forget`` ran, or the shutdown called them all (``end_stops``). The caller holds
        ``changed``."""
        if self._stops_ended:
            return True
        if record.status != "stopped":
            return False
        # One dict lookup (atomic): not under ``_lock``, which is never taken inside ``changed``.
        return self._records.get(record.session_id) is not record

    def _unwatch(self, record: SessionRecord, watcher: Callable[[], None]) -> None:
        with self.changed:
            watchers = self._stop_watchers.get(record)
            if watchers is not None and watcher in watchers:
                watchers.remove(watcher)
                if not watchers:
                    del self._stop_watchers[record]

    def shared_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """One dict per distinct set of attributes: sessions started alike share it
        (records are kept for every hibernated session, so bytes count)."""
        key = repr(sorted(attrs.items()))
        with self._lock:
            if key in self._attr_dicts or len(self._attr_dicts) < _SHARED_ATTR_SETS:
                return self._attr_dicts.setdefault(key, attrs)
        return attrs

    def _unindex(self, record: SessionRecord) -> None:
        tenant = self._by_tenant.get(record.tenant_id)
        if tenant is not None:
            tenant.pop(record.session_id, None)
            if not tenant:
                del self._by_tenant[record.tenant_id]


def _already_exists(existing: SessionRecord) -> SessionAlreadyExists:
    """The error for a new session (start or resume) whose id ``existing`` holds."""
    if existing.status == "stopped":
        return SessionAlreadyExists(
            existing.session_id,
            "it is still being stopped on this host (its incarnation has yet to end): "
            "start or resume it again once that stop is over",
        )
    return SessionAlreadyExists(
        existing.session_id,
        f"it is {existing.status} on this host: use it as it is, or stop_session() it first",
    )


def _nothing() -> None:
    """Withdraws a watcher that already ran."""
