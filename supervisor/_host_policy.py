"""``HostPolicy``: the settings an ``AgentHost`` runs every session by, validated once; and
the checks of the arguments its calls take, shared by every form of a call (blocking,
``host.futures``, ``AsyncAgentHost``), so that each refuses a bad argument alike, at the
call, before anything is sent or started.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from actors import AgentTemplate, Subscriber
from supervisor._session_attrs import plain_text, validate
from supervisor.intensity import RestartIntensity

__all__ = [
    "MAX_SETTING_SECONDS",
    "MAX_WAIT_SECONDS",
    "MAX_WORKERS",
    "HostPolicy",
    "call_wait",
    "check_label",
    "check_parked_threads",
    "check_since",
    "check_stop_checkpoint",
    "check_subscriber",
    "check_worker_count",
    "check_worker_options",
    "resume_arguments",
    "start_arguments",
    "worker_call_timeout",
    "workers_wait",
]

MAX_SETTING_SECONDS = 86_400
"""The longest ``call_timeout``, ``restart_wait`` and ``worker_call_timeout`` (a day).

``call_timeout`` also bounds the stop of each session, and the root supervisor's
shutdown waits up to the sum of those bounds over every live session: past a day
each, tens of thousands of sessions would take that sum beyond what Python's waits
accept (``threading.TIMEOUT_MAX``, about 292 years), and the shutdown would fail."""

MAX_WAIT_SECONDS = 365 * 86_400
"""A call's own ``timeout`` beyond this (a year) is taken as a year: no call waits that
long, and Python's waits refuse a timeout past ``threading.TIMEOUT_MAX``."""

MAX_WORKERS = 1024
"""The most worker processes one host (one ``WorkerPool``) runs.

Each worker is a process of its own, with its threads, its pipe and its copy of
the imported modules (tens of MB), and each hosts many sessions: past the cores
of the largest machines more workers add no throughput, only memory, and a host
with thousands would meet the process (``RLIMIT_NPROC``) and file descriptor
limits, or the machine's memory, one slow start at a time. A count above this is
a mistake (a unit mix-up, the wrong setting), refused before anything starts."""


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Timeouts, restart intensity and checkpoint and hibernation cadence of one host's
    sessions (``AgentHost``'s constructor documents each). Immutable, so thread-safe.

    Raises:
        TypeError: a setting of the wrong type (``bool`` is no number here).
        ValueError: an invalid setting (the message names it and says what is allowed).
    """

    checkpoint_every: int | None = 1
    hibernate_after_ms: int | None = None
    max_restarts: int = 3
    max_seconds: float = 5.0
    call_timeout: float = 120.0
    restart_wait: float = 10.0
    max_steps: int = 8
    clock: Callable[[], float] = field(default=time.monotonic)

    def __post_init__(self) -> None:
        _positive_or_none("checkpoint_every", self.checkpoint_every)
        _positive_or_none("hibernate_after_ms", self.hibernate_after_ms)
        RestartIntensity(self.max_restarts, self.max_seconds, self.clock)  # the supervisor's rules
        call_timeout = _seconds(
            "call_timeout",
            self.call_timeout,
            rule="a positive, finite number of seconds",
            zero=False,
            most=MAX_SETTING_SECONDS,
            beyond=" (a day): it also bounds each session's stop at shutdown; give send() a "
            "longer timeout= for a longer turn",
        )
        restart_wait = _seconds(
            "restart_wait",
            self.restart_wait,
            rule="a finite number of seconds >= 0 (0: a call does not wait for a restart)",
            zero=True,
            most=MAX_SETTING_SECONDS,
            beyond=" (a day)",
        )
        object.__setattr__(self, "call_timeout", call_timeout)
        object.__setattr__(self, "restart_wait", restart_wait)
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int):
            raise TypeError(f"max_steps must be an int, got {_shown(self.max_steps)}")
        if self.max_steps < 1:
            raise ValueError(
                "max_steps must be a positive integer (the most model calls in one turn), "
                f"got {self.max_steps!r}"
            )


def check_parked_threads(parked_threads: object) -> None:
    """Refuse an ``AgentHost(parked_threads=)`` that is not an integer >= 0.

    Raises:
        TypeError: not an ``int`` (``bool`` included).
        ValueError: below 0.
    """
    if isinstance(parked_threads, bool) or not isinstance(parked_threads, int):
        raise TypeError(f"parked_threads must be an int, got {_shown(parked_threads)}")
    if parked_threads < 0:
        raise ValueError(
            "parked_threads must be >= 0 (0: a session's thread ends with it), "
            f"got {parked_threads!r}"
        )


def _positive_or_none(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def _shown(value: object) -> str:
    """``value`` for an error message: its type, then its repr (shortened past 80 characters)."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{type(value).__name__} {shown}"


def _seconds(
    name: str,
    value: object,
    *,
    rule: str,
    zero: bool,
    most: float,
    clamp: bool = False,
    beyond: str = "",
) -> float:
    """``value`` as a number of seconds by ``rule``: a real number (``bool`` excluded),
    finite, > 0 (``>= 0`` with ``zero``); past ``most`` it is ``most`` with ``clamp``, else
    refused (``beyond``, after the limit in the message, says what it is and why)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {rule}, got {_shown(value)}")
    seconds: float = value if isinstance(value, int | float) else float(value)
    if (
        not (isinstance(seconds, int) or math.isfinite(seconds))
        or seconds < 0
        or (seconds == 0 and not zero)
    ):
        raise ValueError(f"{name} must be {rule}, got {seconds!r}")
    if seconds > most:
        if clamp:
            return most
        raise ValueError(f"{name} must be at most {most} seconds{beyond}, got {seconds!r}")
    return seconds


# -- the checks of call arguments, one for every form of a call -------------------------------


def call_wait(timeout: object, default: float) -> float:
    """The seconds a call (``send``) may take: its ``timeout``, or ``default`` (the host's
    ``call_timeout``) when that is ``None``. A ``timeout`` past ``MAX_WAIT_SECONDS`` is
    taken as that (a wait that long is no limit in practice).

    Raises:
        TypeError: ``timeout`` is neither a number nor ``None``.
        ValueError: it is not positive, or not finite (``inf``, ``nan``).
    """
    if timeout is None:
        return default
    return _seconds(
        "timeout",
        timeout,
        rule="a positive, finite number of seconds, or None for the host's call_timeout",
        zero=False,
        most=MAX_WAIT_SECONDS,
        clamp=True,
    )


def workers_wait(timeout: object) -> float | None:
    """``wait_for_workers``'s ``timeout``: ``None`` (no limit) or seconds ``>= 0`` (0: look
    once), clamped as ``call_wait`` clamps.

    Raises:
        TypeError, ValueError: as ``call_wait`` says.
    """
    if timeout is None:
        return None
    return _seconds(
        "timeout",
        timeout,
        rule="a finite number of seconds >= 0, or None to wait without a limit",
        zero=True,
        most=MAX_WAIT_SECONDS,
        clamp=True,
    )


def worker_call_timeout(value: object) -> float | None:
    """The ``worker_call_timeout`` option: ``None`` (no limit) or positive seconds, at most
    ``MAX_SETTING_SECONDS``.

    Raises:
        TypeError, ValueError: naming ``worker_call_timeout``.
    """
    if value is None:
        return None
    return _seconds(
        "worker_call_timeout",
        value,
        rule="a positive, finite number of seconds, or None for no limit",
        zero=False,
        most=MAX_SETTING_SECONDS,
        beyond=" (a day); pass None for no limit",
    )


def check_worker_options(
    workers: object, options: Mapping[str, object], known: Collection[str]
) -> None:
    """``workers`` and the ``worker_*`` keywords of ``AgentHost()``, before anything starts:
    ``workers`` a positive int or ``None``, each keyword one of ``known``, given only with
    ``workers``, and ``worker_call_timeout`` in range (the pool checks the others as it is
    built, before any worker starts).

    Raises:
        TypeError: an unknown keyword (as Python says of one), or a wrong type.
        ValueError: options without ``workers`` (the message names them), or a bad value.
    """
    for name in options:
        if name not in known:
            raise TypeError(f"AgentHost() got an unexpected keyword argument {name!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):
        raise TypeError(f"workers must be a positive int or None, got {_shown(workers)}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    if workers is not None:
        check_worker_count(workers)
    if workers is None and options:
        verb = "applies" if len(options) == 1 else "apply"
        raise ValueError(
            f"{', '.join(options)} only {verb} to worker processes; pass workers=N to run "
            "sessions in worker processes, or drop them"
        )
    worker_call_timeout(options.get("worker_call_timeout"))


def check_worker_count(workers: int) -> None:
    """``workers`` (a positive int) against ``MAX_WORKERS``.

    Raises:
        ValueError: more than ``MAX_WORKERS``; the message says why.
    """
    if workers > MAX_WORKERS:
        raise ValueError(
            f"workers must be at most {MAX_WORKERS}, got {workers}: each worker is a process "
            "hosting many sessions, and more than the machine's cores add memory, not "
            "throughput (a few per core is plenty; os.cpu_count() is "
            f"{os.cpu_count()} here)"
        )


def check_stop_checkpoint(checkpoint: object) -> None:
    """``stop_session``'s ``checkpoint``: a ``bool``.

    Raises:
        TypeError: it is not one.
    """
    if not isinstance(checkpoint, bool):
        raise TypeError(f"stop_session()'s checkpoint must be True or False, not {checkpoint!r}")


def check_label(label: object) -> str | None:
    """A checkpoint's ``label``: ``None``, or text a checkpoint can hold.

    Raises:
        TypeError: neither a ``str`` nor ``None``.
        ValueError: it holds a lone surrogate.
    """
    if label is None:
        return None
    if not isinstance(label, str):
        raise TypeError(f"label must be a str or None, got {type(label).__name__}")
    return plain_text("label", label)


def check_since(since: object) -> int | None:
    """An events cursor: ``None`` (every event still held) or an ``int`` (a seq).

    Raises:
        TypeError: anything else, ``bool`` included.
    """
    if since is not None and (isinstance(since, bool) or not isinstance(since, int)):
        raise TypeError(
            "since must be an int (the cursor of an earlier EventBatch) or None, "
            f"got {_shown(since)}"
        )
    return since


def check_subscriber(
    subscriber: object, name: str = "subscriber", called: str = "with each new Event"
) -> Subscriber:
    """A function to call back, checked before it is subscribed (a value that is not
    callable would fail, with a logged traceback, at every event).

    Raises:
        TypeError: it is not callable (the message names it, and when it is ``called``).
    """
    if not callable(subscriber):
        shown = _shown(subscriber)
        raise TypeError(f"{name} must be callable (it is called {called}), got {shown}")
    return cast(Subscriber, subscriber)


def _session_id(session_id: object) -> str:
    text = plain_text("session_id", session_id)
    if not text:
        raise ValueError(f"session_id must be a non-empty str, got {text!r}")
    return text


def _template(template: object) -> AgentTemplate:
    if not isinstance(template, AgentTemplate):
        raise TypeError(f"template must be an actors.AgentTemplate, got {template!r}")
    return template


def start_arguments(
    template: object,
    session_id: object,
    tenant_id: object,
    api_key: object,
    attrs: Mapping[str, Any],
) -> str | None:
    """The checks of ``start_session``'s arguments; the ``session_id`` to use (``None``
    stays ``None``: a new random id).

    Raises:
        TypeError, ValueError: an invalid argument or attribute (the message names it).
    """
    checked = None if session_id is None else _session_id(session_id)
    _template(template)
    validate({**attrs, "tenant_id": tenant_id, "api_key": api_key})
    return checked


def resume_arguments(  # noqa: PLR0917 (mirrors AgentHost.resume's parameters)
    session_id: object,
    template: object,
    checkpoint_id: object,
    tenant_id: object,
    api_key: object,
    attrs: Mapping[str, Any],
) -> str:
    """The checks of ``resume``'s arguments; the ``session_id`` to use.

    Raises:
        TypeError, ValueError: an invalid argument or attribute (the message names it).
    """
    checked = _session_id(session_id)
    _template(template)
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise TypeError(f"checkpoint_id must be a str or None, got {_shown(checkpoint_id)}")
    tenant = "default" if tenant_id is None else tenant_id  # the saved one decides
    validate({**attrs, "tenant_id": tenant, "api_key": api_key})
    return checked
