"""``WorkerPool``: N worker processes, session placement, and what happens when one dies.

A session is placed on the live worker with the fewest sessions and stays
there. When a worker dies the pool (on that worker's reader thread) crashes the
proxy actor of every session that was on it with ``supervisor.kill`` and a
reason naming the worker and its exit code or signal, then starts a
replacement: the registry evicts each session at once and the host's
supervisor resumes it from its last checkpoint on a live worker, chosen once
the replacement is started (``place`` waits for it), so that it takes its
share. Workers that keep dying are themselves subject to a restart intensity:
past it the pool stops replacing them and calls ``on_give_up``. A replacement
whose start raises (no free file descriptors, say) is retried with a short
backoff, each attempt counted against that intensity; the pool gives up past it,
or once starting has failed for a whole ``max_seconds`` window.

A worker is started when its first frame (``ready``) arrives. One that exits on
its own before that cannot start (an unguarded main file it re-imports, an
initializer that raises): the constructor raises ``WorkerStartError`` at once,
and after three replacements in a row that could not start the pool stops
replacing workers, as when the intensity is exceeded.

Starting workers fast: with ``forkserver`` every worker (a replacement after a
SIGKILL too) is forked from one server process, which imports the modules of
its *preload* list once, so a worker does not import them again. The pool
preloads the worker's own module (with pykka, cloudpickle, ``actors`` and the
rest of ``supervisor``), and asks for the parent's main file too, which CPython
3.11 ignores (see ``_preload_modules``). The forkserver is a process-wide
singleton that reads its preload list only when it starts: if anything started
a ``forkserver`` process before the first ``WorkerPool`` of the process (a
``multiprocessing.get_context("forkserver").Process`` of the application, say),
the preload never applies and every worker pays those imports itself (about
0.3 s here). Setting the list also replaces any preload list the application
set before.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import multiprocessing
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle
import pykka

from actors import AgentTemplate, EventBuffer, Model
from supervisor._actor import kill
from supervisor._host_policy import check_worker_count, worker_call_timeout
from supervisor._runtime import WorkerInfo
from supervisor.errors import TemplateNotPicklable, WorkerCrashed, WorkerStartError
from supervisor.intensity import Backoff, RestartIntensity
from supervisor.tuning import scheduling_before_pin
from supervisor.workers._client import LoadedTemplate, WorkerClient
from supervisor.workers._io import named as io_named
from supervisor.workers._worker_process import WorkerSetup

__all__ = ["WorkerPool"]

logger = logging.getLogger("supervisor.workers")

_START_TIMEOUT = 120.0
"""Seconds a new pool waits for each worker to serve (its imports and initializer)."""

_SPAWN_WAIT = 30.0
"""Seconds ``close`` waits for replacement workers being started, to shut them down too."""

_SHUTDOWN_WAIT = 5.0
"""Seconds ``close`` gives the workers, together, to stop their sessions and exit before it
kills those still running."""

_START_METHODS = ("forkserver", "spawn")
"""The start methods a pool takes (``fork`` is refused: the parent is threaded)."""

_START_FAILURES = 3
"""Replacement workers in a row that exit before serving, after which the pool stops
replacing them (one failure could be transient: no free memory or file descriptors)."""

_START_HINT = (
    ". The usual causes: the worker_initializer raised; or the main file creates an AgentHost "
    "when imported, and a worker imports the main file again, so put that code under "
    '`if __name__ == "__main__":`'
)


class _Placement:
    __slots__ = ("client", "down", "events", "link", "ref", "template_key")

    def __init__(self, client: WorkerClient, events: EventBuffer) -> None:
        self.client = client
        self.events = events
        self.template_key: str | None = None  # the template it uses there, once loaded
        self.ref: pykka.ActorRef[Any] | None = None
        self.link: Any = None  # the incarnation's ``SessionLink``, once attached
        self.down: str | None = None  # why it ended, if that came before ``attach``


def _preload_modules() -> list[str]:
    """What the forkserver imports once: the worker's module, and ``"__main__"``.

    ``"__main__"`` (CPython's own default) is meant to run a main *file*
    (``python app.py``) once in the forkserver rather than in every worker,
    which multiprocessing otherwise re-runs as ``__mp_main__`` before the
    worker starts. CPython 3.11 never hands the forkserver the file's path
    (gh-126631, fixed upstream in 2025, not in 3.11), so there it does nothing
    and each worker still pays for what the main file imports beyond the
    worker's own modules. Nothing is lost where workers re-run no main:
    ``python -c``, ``python -m pytest``, ``python -m pkg`` (a ``__main__.py``),
    interactive sessions. A ``python -m app.server`` main is re-run in every
    worker on every version; preloading it by name would import application
    code (and run its module-level side effects) in the forkserver, the
    process every worker is forked from, so it is not done.
    """
    return ["__main__", "supervisor.workers._worker_process"]


def _unimportable_main() -> str | None:
    """The main program's path when workers could not import it again, else ``None``.

    Forkserver and spawn workers run the parent's main file again (by path, or
    by module name under ``python -m``). A program read from standard input has
    the path ``<stdin>``, which is no file: every worker would die on start.
    """
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return None
    path = getattr(main, "__file__", None)  # none: interactive, or ``python -c``
    if path is None:
        return None
    base = multiprocessing.process.ORIGINAL_DIR or os.getcwd()  # type: ignore[attr-defined]
    return None if os.path.isfile(os.path.join(base, path)) else str(path)


def _default_context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


class WorkerPool:
    """Worker processes hosting sessions for an ``AgentHost`` (``AgentHost(workers=N)``).

    Thread-safe: one lock guards placement; worker deaths are handled on the
    dead worker's reader thread.

    Args:
        size: Number of worker processes (>= 1, at most ``MAX_WORKERS``, 1024).
        memory_limit: RLIMIT_AS per worker in bytes, or ``None``.
        initializer: Called with ``*initargs`` in each worker (replacements too)
            before it serves; shipped with cloudpickle. If it raises, the
            worker cannot start (``WorkerStartError``).
        initargs: Arguments of ``initializer``.
        call_timeout: Seconds a call to a worker may take before the worker is
            SIGKILLed and replaced (``None``: no limit; a dead worker still
            fails its calls at once): positive and finite, at most a day.
        start_method: ``forkserver`` (default where available) or ``spawn``;
            never ``fork`` (the parent is threaded).
        max_restarts: Worker replacements allowed within ``max_seconds``.
        max_seconds: Window of ``max_restarts``.
        on_give_up: Called (with a message) when workers die too often and the
            pool stops replacing them.
        clock: Monotonic seconds, for the intensity window.
        io: How both ends read each worker's pipe: ``"auto"`` (the platform's
            best, chosen once at import) or ``"portable"`` (reader threads only,
            as where ``epoll`` is missing); see ``supervisor.workers._io``.
    """

    def __init__(
        self,
        size: int,
        *,
        memory_limit: int | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        call_timeout: float | None = None,
        start_method: str | None = None,
        max_restarts: int = 50,
        max_seconds: float = 10.0,
        on_give_up: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        io: str = "auto",
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"workers must be a positive integer, got {size!r}")
        check_worker_count(size)  # before any process starts
        if start_method == "fork":
            raise ValueError(
                "worker_start_method='fork' is unsafe in a threaded host; use forkserver"
            )
        if start_method is not None and start_method not in _START_METHODS:
            raise ValueError(
                f"worker_start_method must be one of {', '.join(_START_METHODS)} or None, "
                f"got {start_method!r}"
            )
        call_timeout = worker_call_timeout(call_timeout)  # the host's rule: > 0, finite
        main_path = _unimportable_main()
        if main_path is not None:
            raise WorkerStartError(
                None,
                f"the main program {main_path!r} is not a file",
                ". Each worker imports the main program again from its file, as "
                "multiprocessing's forkserver and spawn do: save the program to a file "
                "(or run it with python -c or -m)",
            )
        if memory_limit is not None and (
            isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 1
        ):  # (``True`` is an int: a limit of 1 byte)
            raise ValueError(f"worker_memory_limit must be a positive int, got {memory_limit!r}")
        self._io = io_named(io)
        self._setup = WorkerSetup(
            memory_limit,
            _pickled_initializer(initializer, initargs),
            io=self._io.name,
            switch_interval=sys.getswitchinterval(),
            scheduling=scheduling_before_pin(),
        )
        context = _default_context() if start_method is None else None
        self._context = context or multiprocessing.get_context(start_method)
        if self._context.get_start_method() == "forkserver":
            self._context.set_forkserver_preload(_preload_modules())
        self.size = size
        self.call_timeout = call_timeout
        self._intensity = _intensity(max_restarts, max_seconds, clock)
        self._on_give_up = on_give_up
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified when workers come and go
        self._workers: list[WorkerClient] = []
        self._placements: dict[str, _Placement] = {}
        # Each template's cloudpickle bytes, by ``id``, while the template lives: a template
        # a program no longer holds (its sessions stopped) is forgotten with its bytes.
        self._pickled: dict[int, tuple[weakref.ref[AgentTemplate], bytes]] = {}
        self._closed = False
        self.gave_up = False
        self._start_failures = 0  # workers in a row that exited before serving
        self._unstartable: WorkerStartError | None = None  # why, once replacements stopped
        self.deaths = 0  # workers that died while the pool was open (not at its close)
        self._constructing = True  # a worker failing to start now fails the constructor
        self._spawning = 0  # workers being started (see ``_spawn``)
        try:
            started = []
            for _ in range(size):
                with self._lock:
                    self._spawning += 1
                started.append(self._spawn())
            for client in started:
                self._await_start(client)
        except BaseException:
            self.close()
            raise
        with self._lock:
            self._constructing = False

    # -- workers ------------------------------------------------------------------

    def _spawn(self) -> WorkerClient:
        """Start a worker; the caller counted it in ``_spawning`` (under the lock) when it
        decided to, so ``close`` waits for it and no worker is left running unseen."""
        try:
            client = WorkerClient(
                self._context, self._on_push, self._on_death, self._setup, self._io
            )
        except BaseException:
            with self._changed:
                self._spawning -= 1
                self._changed.notify_all()
            raise
        with self._changed:
            self._spawning -= 1
            self._workers.append(client)
            self._changed.notify_all()
        return client

    def _await_start(self, client: WorkerClient) -> None:
        """Return once ``client`` serves; raise ``WorkerStartError`` if it exited first."""
        try:
            if client.wait_ready(_START_TIMEOUT):
                return
        except TimeoutError:
            status = f"not serving after {_START_TIMEOUT} s"
            raise WorkerStartError(client.pid, status) from None  # ``close`` kills it
        if client.exitcode is not None and client.exitcode < 0:  # killed while starting
            return  # like any death: ``_on_death`` replaces it
        raise self._unstartable or WorkerStartError(
            client.pid, client.exit_status or "exit status unknown", _START_HINT
        )

    def wait_for_workers(self, timeout: float | None) -> bool:
        """Wait until every worker serves (dead ones replaced and ready): True; False on
        timeout, or at once when no replacement will come (given up, or closed)."""

        def settled() -> bool:
            serving = sum(w.alive and w.ready for w in self._workers)
            return serving >= self.size or self.gave_up or self._closed

        with self._changed:
            self._changed.wait_for(settled, timeout)
            return sum(w.alive and w.ready for w in self._workers) >= self.size and not self._closed

    def info(self) -> list[WorkerInfo]:
        """The live workers, oldest first, with the sessions placed on each.

        Taken under the pool's lock, so consistent in itself: a session appears
        on one worker at most, and only while it is placed there (from ``place``
        to ``release``).
        """
        with self._lock:
            placed: dict[WorkerClient, list[str]] = {}
            for session_id, placement in self._placements.items():
                placed.setdefault(placement.client, []).append(session_id)
            return [
                WorkerInfo(w.pid, tuple(sorted(placed.get(w, ()))))
                for w in self._workers
                if w.alive and w.pid is not None
            ]

    def link_of(self, session_id: str, ref: pykka.ActorRef[Any]) -> Any:
        """The ``SessionLink`` of the incarnation whose proxy is ``ref``, or ``None``
        (released, or another incarnation's). Thread-safe: read without the lock (one
        dict lookup is atomic), as the answer may be stale once any lock is released
        anyway; a call on a link whose session has left fails with ``NotDelivered``."""
        placement = self._placements.get(session_id)
        if placement is None or placement.ref is not ref:
            return None
        return placement.link

    def _on_death(self, client: WorkerClient) -> None:
        """A worker died (on its reader thread): replace it, crash its sessions' proxies."""
        gave_up_now = replace = False
        # Exited on its own before serving: a replacement may well fail the same way.
        start_failed = not client.ready and client.exitcode is not None and client.exitcode > 0
        with self._lock:
            if client in self._workers:
                self._workers.remove(client)
            victims = [(sid, p.ref) for sid, p in self._placements.items() if p.client is client]
            if not self._closed:
                self.deaths += 1
            # (During the constructor, which raises WorkerStartError, nothing is replaced.)
            if not self._closed and not self.gave_up and not (start_failed and self._constructing):
                self._start_failures += start_failed  # a ``ready`` frame resets it
                if self._start_failures >= _START_FAILURES:
                    self._unstartable = WorkerStartError(
                        client.pid, client.exit_status or "?", _START_HINT
                    )
                replace = self._unstartable is None and self._intensity.allow()
                gave_up_now = self.gave_up = not replace
                self._spawning += int(replace)  # counted now: ``close`` waits for it
        if gave_up_now:
            message = (
                f"{self._unstartable}; no longer replacing workers"
                if self._unstartable is not None
                else f"workers died too often (more than {self._intensity.max_restarts} in "
                f"{self._intensity.max_seconds} s; last: pid {client.pid}, {client.exit_status}); "
                "no longer replacing them"
            )
            logger.error(message)
            if self._on_give_up is not None:
                self._on_give_up(message)
        reason = f"worker pid {client.pid} died ({client.exit_status})"
        for session_id, ref in victims:
            if ref is not None:  # after the session's last frames (its last checkpoint)
                client.after_delivered(session_id, functools.partial(kill, ref, reason))
        if replace:
            self._replace()
        else:
            with self._changed:
                self._changed.notify_all()  # wake placements waiting for a worker

    def _replace(self) -> None:
        """Start a replacement worker (counted in ``_spawning`` by the caller), retrying
        with a short backoff while starting it fails, on the dead worker's reader thread.

        A start that raises (no free file descriptors or memory, no thread) may well be
        transient, so it is retried, as an OTP supervisor restarts a child whose start
        failed: each retry counts against the restart intensity, and the pool gives up
        (``gave_up``, ``on_give_up``) past it or once starting has failed for a whole
        ``max_seconds`` window. Left at one failed attempt, the pool kept a worker fewer
        for good while ``gave_up`` stayed false: a readiness probe said "being replaced"
        for ever. ``close`` ends the retries (it wakes the backoff's wait).
        """
        backoff = _replace_backoff(self._intensity.max_seconds)
        first_failure: float | None = None
        failures = 0
        while True:
            try:
                self._spawn()  # (uncounts itself from ``_spawning``, started or not)
                return
            except Exception as exc:
                failures += 1
                logger.warning(
                    "could not start a replacement worker (attempt %d)", failures, exc_info=True
                )
                error = f"{type(exc).__name__}: {exc}"
            now = self._intensity.now()
            first_failure = now if first_failure is None else first_failure
            with self._changed:
                if self._closed:
                    self._changed.notify_all()
                    return
                retry = (
                    now - first_failure < self._intensity.max_seconds and self._intensity.allow()
                )
                if not retry:
                    self.gave_up = True
                    self._unstartable = WorkerStartError(
                        None,
                        f"a replacement worker could not be started in {failures} attempts "
                        f"({error})",
                        ". Free the resource it lacked, then restart the host",
                    )
                self._changed.notify_all()  # (a waiting ``place`` sees the give-up at once)
                if retry:
                    # Not counted in ``_spawning`` while it waits: ``place`` puts sessions on
                    # the live workers meanwhile rather than wait for a start that fails.
                    self._changed.wait_for(lambda: self._closed, backoff.delay(failures))
                    if self._closed:
                        return
                    self._spawning += 1  # counted again (under the lock, not closed):
                    # ``close`` waits for this start, so no worker is left running unseen
            if not retry:
                message = f"{self._unstartable}; no longer replacing workers"
                logger.error(message)
                if self._on_give_up is not None:
                    self._on_give_up(message)
                return

    def _on_push(self, client: WorkerClient, frame: dict[str, Any]) -> None:
        """An unsolicited frame of ``client``, or a reply that carries its call's events (on
        the thread reading the pipe, before the reply is delivered)."""
        op = frame.get("op")
        if op == "ready":  # a worker started: starting works
            with self._changed:
                self._start_failures = 0
                self._changed.notify_all()
            return
        session_id = frame.get("session")
        # Read without the lock (one dict lookup is atomic): on every reply of a turn, and
        # an answer taken under the lock could be stale the moment it was released anyway.
        placement = self._placements.get(session_id) if isinstance(session_id, str) else None
        if placement is None or placement.client is not client:
            return
        events = frame.get("events")
        if isinstance(events, list):  # an ``events`` frame, or a reply's held-back events
            placement.events.publish_all(
                (kind, data) for kind, data in events if type(kind) is str and type(data) is dict
            )
        elif op == "event":
            data = frame.get("data") or {}
            placement.events.publish(str(frame.get("type")), **data)
        elif op == "down":
            # (``host``: ended on this side, delivering the worker's frames: ``end_session``)
            where = "on the host, delivering" if frame.get("host") else "in"
            why = f"died {where} worker pid {client.pid}: {frame.get('reason')}"
            with self._lock:  # no proxy yet: ``attach`` crashes it (read under the same lock)
                ref = placement.ref
                if ref is None:
                    placement.down = why
            if ref is not None:
                kill(ref, why)

    # -- placement ------------------------------------------------------------------

    def place(self, session_id: str, events: EventBuffer, timeout: float = 10.0) -> WorkerClient:
        """Pick the least-loaded live worker for a new incarnation of ``session_id``.

        Waits up to ``timeout`` for a replacement when every worker just died, and for
        a replacement being started (a process start: milliseconds), so that it counts
        among the workers to choose from: the sessions of a dead worker, resumed the
        moment it is buried, would otherwise all go to the surviving workers and leave
        their replacement empty.

        Raises:
            WorkerCrashed: no worker is alive (they died too often, or the pool is closed).
            WorkerStartError: no worker is alive, and the last replacement could not start.
        """
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    self._closed
                    or self.gave_up
                    or (self._spawning == 0 and any(w.alive for w in self._workers))
                ),
                timeout,
            )
            live = [w for w in self._workers if w.alive]
            if not live and not self._closed and self._unstartable is not None:
                raise self._unstartable
            if self._closed or not live:
                raise WorkerCrashed(None, "no live worker process left", session_id)
            client = min(live, key=lambda w: w.sessions)
            client.sessions += 1
            self._placements[session_id] = _Placement(client, events)
        return client

    def attach(
        self,
        session_id: str,
        client: WorkerClient,
        ref: pykka.ActorRef[Any],
        link: Any = None,
    ) -> None:
        """Record the proxy (and its ``SessionLink``) of a placed session; crash the
        proxy at once if its worker already died, or the session did (a ``down`` read
        before this: ``_on_push``)."""
        down = None
        with self._lock:
            placement = self._placements.get(session_id)
            if placement is not None and placement.client is client:
                placement.link = link  # before ``ref``: ``link_of`` reads without the lock
                placement.ref = ref
                down = placement.down
        if not client.alive:
            kill(ref, f"worker pid {client.pid} died ({client.exit_status})")
        elif down is not None:
            kill(ref, down)

    def release(self, session_id: str, client: WorkerClient) -> None:
        """Forget the placement of ``session_id`` on ``client`` (its proxy ended); unload
        its template from the worker if no other session there uses it."""
        with self._lock:
            placement = self._placements.get(session_id)
            if placement is not None and placement.client is client:
                del self._placements[session_id]
                client.sessions -= 1
                if placement.template_key is not None:
                    self._drop_template_user(client, placement.template_key)

    def _drop_template_user(self, client: WorkerClient, key: str) -> None:
        """One session less uses template ``key`` on ``client``; at none, unload it there.

        The caller holds the pool's lock. Every start counts itself before it loads
        (``_reserve_template``), so no start is under way on ``key`` when it is unloaded,
        and the next one loads it again with a frame written after this one. A worker
        hosting sessions for days on templates made per session (per user, say) so keeps
        only those of its current sessions.
        """
        loaded = client.templates.get(key)
        if loaded is None:
            return
        loaded.users -= 1
        if loaded.users > 0:
            return
        del client.templates[key]
        if client.alive:
            with contextlib.suppress(Exception):  # a dead worker forgets everything anyway
                client.submit("unload_template", {"key": key})

    # -- templates --------------------------------------------------------------------

    def load_template(
        self,
        client: WorkerClient,
        template: AgentTemplate,
        model: Model,
        session_id: str,
        call: Callable[[dict[str, Any]], object] | None = None,
    ) -> str:
        """Ship ``template`` and its resolved ``model`` to ``client`` unless loaded there;
        return their key. The placement of ``session_id`` on ``client`` counts as a user
        of the template there until it is released (see ``release``). ``call`` writes
        the ``load_template`` payload and waits for its reply (default: ``client.call``
        with the pool's ``call_timeout``).

        The model is resolved in the parent (through the host's ProviderRegistry,
        as in thread mode), so a re-registered profile takes effect at once.

        Raises:
            TemplateNotPicklable: naming the part cloudpickle refused.
            TemplateNotLoadable: the worker could not load it (a module it imports
                by name is missing there, or its import raised).
        """
        template_bytes = self._pickle(template)
        try:
            model_bytes = model if model is template.model else cloudpickle.dumps(model)
        except Exception as exc:
            raise TemplateNotPicklable(f"model (resolved from {template.model!r})", exc) from exc
        if not isinstance(model_bytes, bytes):
            model_bytes = b""  # the template's own model: shipped inside the template
        key = hashlib.blake2b(template_bytes + model_bytes, digest_size=16).hexdigest()
        if not self._reserve_template(client, session_id, key):
            about = _described(template, model)
            payload = {"key": key, "template": template_bytes, "model": model_bytes, "about": about}
            if call is None:
                client.call("load_template", payload, self.call_timeout)
            else:
                call(payload)
            with self._lock:
                loaded = client.templates.get(key)
                if loaded is not None:  # (still counted: the caller releases after this)
                    loaded.ready = True
        return key

    def _reserve_template(self, client: WorkerClient, session_id: str, key: str) -> bool:
        """Count ``session_id``'s placement as a user of template ``key`` on ``client``
        (before any load, so that no release unloads it meanwhile); True if the worker has
        it already, False if this start must load it (a start still loading it does not
        count: a second load of one key is harmless)."""
        with self._lock:
            loaded = client.templates.get(key)
            if loaded is None:
                loaded = client.templates[key] = LoadedTemplate()
            mine = self._placements.get(session_id)
            if mine is not None and mine.client is client and mine.template_key is None:
                mine.template_key = key
                loaded.users += 1
            return loaded.ready

    def _pickle(self, template: AgentTemplate) -> bytes:
        """``template``'s cloudpickle bytes, made once per template object.

        The cache holds the template weakly: a host that starts each session on a
        template of its own (per user instructions, say) must not keep every one,
        and its bytes, for as long as it runs once their sessions are gone.
        """
        key = id(template)
        cached = self._pickled.get(key)  # one dict lookup: atomic
        if cached is not None and cached[0]() is template:
            return cached[1]
        try:
            data: bytes = cloudpickle.dumps(template)
        except Exception as exc:
            raise _not_picklable(template, exc) from exc
        with self._lock:
            fresh = key not in self._pickled
            self._pickled[key] = (weakref.ref(template), data)
        if fresh:
            # Forgotten as the template is freed, before its id can be reused; on the
            # thread that frees it, which may hold the pool's lock: one ``dict.pop``, atomic,
            # and no reference to the pool (a closed pool is not kept alive by templates).
            weakref.finalize(template, self._pickled.pop, key, None)
        return data

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Shut every worker down, join it, close its pipe. Idempotent; call after the
        sessions were stopped (the host does)."""
        with self._changed:
            self._closed = True  # no replacement is decided from now on
            self._changed.notify_all()  # (ends a replacement's backoff: see ``_replace``)
            self._changed.wait_for(lambda: self._spawning == 0, _SPAWN_WAIT)
            workers = list(self._workers)
        # All at once, with one deadline: each worker stops its sessions meanwhile, and one
        # with a session that will not stop costs the close one wait, not one per worker.
        asked = [(client, client.ask_to_shut_down()) for client in workers]
        deadline = time.monotonic() + _SHUTDOWN_WAIT
        for client, reply in asked:
            client.finish_shutdown(reply, deadline)
        with self._lock:
            self._workers.clear()
            self._pickled.clear()


def _intensity(
    max_restarts: int, max_seconds: float, clock: Callable[[], float]
) -> RestartIntensity:
    """The workers' restart intensity.

    Raises:
        TypeError, ValueError: a bad ``max_restarts`` or ``max_seconds``, named as the
            host's keywords (``worker_max_restarts``): a bare ``max_restarts`` would
            point at the host's own, the sessions' restart intensity.
    """
    try:
        return RestartIntensity(max_restarts, max_seconds, clock)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        if message.startswith(("max_restarts ", "max_seconds ")):
            raise type(exc)(f"worker_{message}") from None
        raise


def _replace_backoff(max_seconds: float) -> Backoff:
    """The delays between attempts to start one replacement worker: from 50 ms, doubling,
    capped at a quarter of the intensity window (at most 1 s), so that a start failing for
    good is tried a few times before the window ends and the pool gives up."""
    cap = min(1.0, max_seconds / 4)
    return Backoff(initial=min(0.05, cap), factor=2.0, max_delay=cap)


def _pickled_initializer(
    initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> bytes | None:
    """``(initializer, initargs)`` as cloudpickle bytes for the workers, or ``None``.

    Raises:
        TypeError: not callable, ``initargs`` not a tuple, or either cannot be pickled.
    """
    if not isinstance(initargs, tuple):
        raise TypeError(f"worker_initargs must be a tuple, got {type(initargs).__name__}")
    if initializer is None:
        if initargs:
            raise TypeError("worker_initargs given without a worker_initializer")
        return None
    if not callable(initializer):
        raise TypeError(f"worker_initializer must be callable, got {initializer!r}")
    try:
        data: bytes = cloudpickle.dumps((initializer, initargs))
    except Exception as exc:
        raise TypeError(
            "worker_initializer and worker_initargs are sent to each worker with cloudpickle, "
            f"which refused them ({type(exc).__name__}: {exc}); pass plain data and create "
            "live resources inside the initializer"
        ) from exc
    return data


def _not_picklable(template: AgentTemplate, error: BaseException) -> TemplateNotPicklable:
    parts: list[tuple[str, object]] = [(f"model ({type(template.model).__name__})", template.model)]
    parts += [(f"tools[{i}] ({t.name})", t) for i, t in enumerate(template.tools)]
    parts += [(f"plugins[{i}] ({p.name})", p) for i, p in enumerate(template.plugins)]
    parts.append(("instructions", template.instructions))
    for name, part in parts:
        try:
            cloudpickle.dumps(part)
        except Exception as exc:
            return TemplateNotPicklable(name, exc)
    return TemplateNotPicklable("template", error)


_DESCRIBED_PARTS = 8
"""How many tools, and how many plugins, a template's description names (then a count)."""


def _described(template: AgentTemplate, model: Model) -> str:
    """``template`` in a few words for ``TemplateNotLoadable``: each part with the module it
    comes from, which is what a worker imports by name to load it."""

    def origin(part: object) -> str:  # a function's (or class's) own name, else its class's
        try:  # (user objects: a ``__getattr__`` may raise anything)
            qualname = getattr(part, "__qualname__", None)
            if not isinstance(qualname, str):
                part, qualname = type(part), type(part).__qualname__
            return f"{getattr(part, '__module__', None) or '?'}.{qualname}"
        except Exception:
            return f"a {type(part).__qualname__}"

    def listed(kind: str, parts: list[tuple[str, object]]) -> list[str]:
        if not parts:
            return []
        named = [f"{name} ({origin(part)})" for name, part in parts[:_DESCRIBED_PARTS]]
        if len(parts) > _DESCRIBED_PARTS:
            named.append(f"{len(parts) - _DESCRIBED_PARTS} more")
        return [f"{kind}: {', '.join(named)}"]

    shown = origin(model)
    if isinstance(template.model, str):
        shown = f"{template.model!r} resolved to {shown}"
    tools: list[tuple[str, object]] = [(t.name, t.fn) for t in template.tools]
    plugins: list[tuple[str, object]] = [(p.name, p) for p in template.plugins]
    described = "; ".join([f"model: {shown}", *listed("tools", tools), *listed("plugins", plugins)])
    return described.encode("utf-8", "backslashreplace").decode("utf-8")  # a frame carries it


WorkerPool.__module__ = "supervisor"
