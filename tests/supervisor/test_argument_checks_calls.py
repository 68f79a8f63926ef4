"""The arguments of a host's calls are checked at the call, alike in every form (blocking,
``host.futures``, ``AsyncAgentHost``), before anything is sent or started.

Before the fix a ``send`` timeout of ``inf``, ``1e10`` or ``nan`` failed with
``OverflowError`` or ``ValueError: Invalid value NaN`` and one of 0 or -1 with a
``TimeoutError``, each time after the turn had run and been checkpointed (a retrying
caller duplicated it), while ``host.futures.send`` took ``inf`` and ``nan``. The
non-blocking ``start_session``, ``resume``, ``steer`` and ``checkpoint`` returned futures
that failed with ``TypeError``; ``subscribe`` took a value that is not callable (every
event then logged a traceback) and ``events(since="a")`` failed with a raw comparison.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from actors import AgentTemplate, Event
from supervisor import AgentHost, AsyncAgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT, HostFactory

TIMEOUT_RULE = (
    "timeout must be a positive, finite number of seconds, or None for the host's call_timeout, got"
)

TEMPLATE = AgentTemplate(instructions="Be brief.")


@pytest.fixture
def host() -> Iterator[AgentHost]:
    """A thread-mode host: the checks run before the mode matters."""
    made = AgentHost(MemoryCheckpointStore())
    try:
        yield made
    finally:
        made.shutdown()


@pytest.fixture
def sid(host: AgentHost) -> str:
    session_id = host.start_session(TEMPLATE, "s")
    assert host.send(session_id, "first").content == "echo: first"
    return session_id


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def send_in(form: str, host: AgentHost, sid: str, timeout: object) -> Any:
    """``send(sid, "again", timeout)`` in ``form``: its answer."""
    bad: Any = timeout
    if form == "blocking":
        return host.send(sid, "again", bad)
    if form == "futures":
        return host.futures.send(sid, "again", bad).result(WAIT)
    return run(AsyncAgentHost(host).send(sid, "again", bad))


class Trace:
    """What the session did: its messages, checkpoints and events, to compare."""

    def __init__(self, host: AgentHost, sid: str) -> None:
        self.messages = len(host.history(sid))
        self.checkpoints = len(host.store.list(sid))
        self.cursor = host.events(sid).cursor


FORMS = ["blocking", "futures", "async"]

BAD_TIMEOUTS: list[tuple[object, type[Exception], str]] = [
    (math.inf, ValueError, f"{TIMEOUT_RULE} inf"),
    (-math.inf, ValueError, f"{TIMEOUT_RULE} -inf"),
    (math.nan, ValueError, f"{TIMEOUT_RULE} nan"),
    (-1, ValueError, f"{TIMEOUT_RULE} -1"),
    (0, ValueError, f"{TIMEOUT_RULE} 0"),
    (0.0, ValueError, f"{TIMEOUT_RULE} 0.0"),
    ("1", TypeError, f"{TIMEOUT_RULE} str '1'"),
    (True, TypeError, f"{TIMEOUT_RULE} bool True"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("timeout", "error", "message"), BAD_TIMEOUTS)
def test_a_bad_send_timeout_is_refused_before_the_turn_runs(  # noqa: PLR0917 (parametrized)
    host: AgentHost, sid: str, form: str, timeout: object, error: type[Exception], message: str
) -> None:
    before = Trace(host, sid)
    with pytest.raises(error) as caught:
        send_in(form, host, sid, timeout)
    assert str(caught.value) == message
    after = Trace(host, sid)
    assert (after.messages, after.checkpoints, after.cursor) == (
        before.messages,
        before.checkpoints,
        before.cursor,
    )
    assert host.send(sid, "still fine").content == "echo: still fine"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("bad", [["s"], {"id": "s"}, 5, None, b"s"])
def test_a_session_id_that_is_no_str_is_named_as_such(
    host: AgentHost, sid: str, form: str, bad: object
) -> None:
    """It was ``TypeError: unhashable type: 'list'`` from a dict lookup, or (an int, bytes)
    ``SessionNotFound``, as if a session of that id might exist."""
    with pytest.raises(TypeError) as caught:
        send_in(form, host, bad, None)  # type: ignore[arg-type]
    assert str(caught.value) == f"session_id must be a str, got {type(bad).__name__}"
    assert host.send(sid, "still fine").content == "echo: still fine"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("timeout", [1e10, 1e300, 10**30, 366 * 86_400])
def test_a_timeout_past_a_year_is_taken_as_a_year(
    make_host: HostFactory, form: str, timeout: object
) -> None:
    """A caller meaning "no limit" gets an answer (it was an ``OverflowError``, after the
    turn ran), in every mode."""
    host = make_host()
    sid = host.start_session(TEMPLATE)
    assert send_in(form, host, sid, timeout).content == "echo: again"
    assert len(host.history(sid)) == 2


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        (-1, ValueError, "got -1"),
        (math.nan, ValueError, "got nan"),
        (math.inf, ValueError, "got inf"),
        ("1", TypeError, "got str '1'"),
    ],
)
def test_wait_for_workers_checks_its_timeout(
    host: AgentHost, timeout: object, error: type[Exception], message: str
) -> None:
    bad: Any = timeout
    rule = "timeout must be a finite number of seconds >= 0, or None to wait without a limit"
    with pytest.raises(error) as caught:
        host.wait_for_workers(bad)
    assert str(caught.value) == f"{rule}, {message}"
    assert host.wait_for_workers(0)
    assert host.wait_for_workers(None)


# -- the non-blocking and async forms check their arguments at the call ---------------------

Call = Callable[[AgentHost, str], object]

BAD_CALLS: list[tuple[str, Call, type[Exception], str]] = [
    (
        "start_session(session_id=5)",
        lambda h, s: h.futures.start_session(TEMPLATE, session_id=5),  # type: ignore[arg-type]
        TypeError,
        "session_id must be a str, got int",
    ),
    (
        "start_session(session_id='')",
        lambda h, s: h.futures.start_session(TEMPLATE, session_id=""),
        ValueError,
        "session_id must be a non-empty str, got ''",
    ),
    (
        "start_session(5)",
        lambda h, s: h.futures.start_session(5),  # type: ignore[arg-type]
        TypeError,
        "template must be an actors.AgentTemplate, got 5",
    ),
    (
        "start_session(tenant_id=5)",
        lambda h, s: h.futures.start_session(TEMPLATE, tenant_id=5),  # type: ignore[arg-type]
        TypeError,
        "session attribute tenant_id must be a non-empty str",
    ),
    (
        "start_session(group_id=5)",
        lambda h, s: h.futures.start_session(TEMPLATE, group_id=5),  # type: ignore[arg-type]
        TypeError,
        "session attribute group_id must be a non-empty str or None",
    ),
    (
        "resume(5, t)",
        lambda h, s: h.futures.resume(5, TEMPLATE),  # type: ignore[arg-type]
        TypeError,
        "session_id must be a str, got int",
    ),
    (
        "resume(s, 5)",
        lambda h, s: h.futures.resume(s, 5),  # type: ignore[arg-type]
        TypeError,
        "template must be an actors.AgentTemplate, got 5",
    ),
    (
        "resume(s, t, 5)",
        lambda h, s: h.futures.resume(s, TEMPLATE, 5),  # type: ignore[arg-type]
        TypeError,
        "checkpoint_id must be a str or None, got int 5",
    ),
    (
        "steer(s, None)",
        lambda h, s: h.futures.steer(s, None),  # type: ignore[arg-type]
        TypeError,
        "the steering text must be a str, got NoneType",
    ),
    (
        "checkpoint(s, 5)",
        lambda h, s: h.futures.checkpoint(s, 5),  # type: ignore[arg-type]
        TypeError,
        "label must be a str or None, got int",
    ),
    (
        "checkpoint(s, lone surrogate)",
        lambda h, s: h.futures.checkpoint(s, "bad \udcff"),
        ValueError,
        "label holds a lone surrogate at index 4",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [pytest.param(c, e, m, id=name) for name, c, e, m in BAD_CALLS],
)
def test_host_futures_raise_for_a_bad_argument_at_the_call(
    host: AgentHost, sid: str, call: Call, error: type[Exception], message: str
) -> None:
    threads = set(threading.enumerate())
    before = Trace(host, sid)
    with pytest.raises(error) as caught:
        call(host, sid)  # raises here: no future is handed out
    assert str(caught.value).startswith(message)
    assert [t.name for t in threading.enumerate() if t not in threads] == []  # no helper ran
    assert [info.session_id for info in host.list_sessions()] == [sid]
    after = Trace(host, sid)
    assert (after.messages, after.checkpoints) == (before.messages, before.checkpoints)


ASYNC_CALLS: list[tuple[str, Callable[[AsyncAgentHost, str], Any], type[Exception], str]] = [
    (
        "start_session(session_id=5)",
        lambda a, s: a.start_session(TEMPLATE, session_id=5),  # type: ignore[arg-type]
        TypeError,
        "session_id must be a str, got int",
    ),
    (
        "resume(5, t)",
        lambda a, s: a.resume(5, TEMPLATE),  # type: ignore[arg-type]
        TypeError,
        "session_id must be a str, got int",
    ),
    (
        "steer(s, None)",
        lambda a, s: a.steer(s, None),  # type: ignore[arg-type]
        TypeError,
        "the steering text must be a str, got NoneType",
    ),
    (
        "checkpoint(s, 5)",
        lambda a, s: a.checkpoint(s, 5),  # type: ignore[arg-type]
        TypeError,
        "label must be a str or None, got int",
    ),
    ("send(timeout=nan)", lambda a, s: a.send(s, "x", math.nan), ValueError, TIMEOUT_RULE),
]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [pytest.param(c, e, m, id=name) for name, c, e, m in ASYNC_CALLS],
)
def test_async_forms_raise_the_same_errors(
    host: AgentHost,
    sid: str,
    call: Callable[[AsyncAgentHost, str], Any],
    error: type[Exception],
    message: str,
) -> None:
    before = Trace(host, sid)
    ahost = AsyncAgentHost(host)
    with pytest.raises(error) as caught:
        run(call(ahost, sid))
    assert str(caught.value).startswith(message)
    # Raised by the coroutine's first step, before it awaits anything (here without a
    # loop: a call handed to a future would need one, to await it, and fail without).
    coroutine = call(ahost, sid)
    with pytest.raises(error) as first_step:
        coroutine.send(None)
    assert str(first_step.value) == str(caught.value)
    assert [info.session_id for info in host.list_sessions()] == [sid]
    assert len(host.history(sid)) == before.messages


def test_blocking_resume_checks_its_template_and_checkpoint_id_first(host: AgentHost) -> None:
    """A stopped session with checkpoints: before the fix ``resume(sid, 5)`` loaded the
    checkpoint and failed with ``AttributeError``."""
    sid = host.start_session(TEMPLATE, "stopped")
    host.send(sid, "hi")
    host.stop_session(sid)
    with pytest.raises(TypeError, match=r"^template must be an actors\.AgentTemplate, got 5$"):
        host.resume(sid, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^checkpoint_id must be a str or None, got int 5$"):
        host.resume(sid, TEMPLATE, 5)  # type: ignore[arg-type]
    assert host.list_sessions() == []  # still stopped
    assert host.resume(sid, TEMPLATE) == sid


def test_blocking_checkpoint_refuses_a_bad_label_before_asking_the_session(
    host: AgentHost, sid: str
) -> None:
    before = Trace(host, sid)
    with pytest.raises(TypeError, match=r"^label must be a str or None, got int$"):
        host.checkpoint(sid, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^label holds a lone surrogate"):
        host.checkpoint(sid, "\udcff")
    assert len(host.store.list(sid)) == before.checkpoints
    assert host.checkpoint(sid, "fine").label == "fine"


# -- subscribe, events and watch ---------------------------------------------------------------


def test_subscribe_refuses_what_is_not_callable(
    host: AgentHost, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(TypeError) as caught:
        host.subscribe(sid, 5)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "subscriber must be callable (it is called with each new Event), got int 5"
    )
    with caplog.at_level(logging.ERROR):
        host.send(sid, "after")
    assert caplog.records == []  # nothing was subscribed: no "not callable" traceback


@pytest.mark.parametrize(
    ("since", "shown"), [("a", "str 'a'"), (1.5, "float 1.5"), (True, "bool True")]
)
def test_events_refuses_a_cursor_that_is_not_an_int(
    host: AgentHost, sid: str, since: object, shown: str
) -> None:
    bad: Any = since
    message = f"since must be an int (the cursor of an earlier EventBatch) or None, got {shown}"
    with pytest.raises(TypeError) as blocking:
        host.events(sid, since=bad)
    assert str(blocking.value) == message
    with pytest.raises(TypeError) as streamed:
        AsyncAgentHost(host).events(sid, since=bad)  # at the call, not at the first event
    assert str(streamed.value) == message
    assert host.events(sid, since=-1).cursor == host.events(sid).cursor  # ints still go


def test_watch_refuses_callbacks_that_are_not_callable(host: AgentHost, sid: str) -> None:
    def on_event(event: Event) -> None:
        pass

    with pytest.raises(TypeError) as event:
        host.futures.watch(sid, 5, lambda: None)  # type: ignore[arg-type]
    assert str(event.value) == (
        "on_event must be callable (it is called with each new Event), got int 5"
    )
    with pytest.raises(TypeError) as stopped:
        host.futures.watch(sid, on_event, None)  # type: ignore[arg-type]
    assert str(stopped.value) == (
        "on_stopped must be callable (it is called once the session is stopped), got NoneType None"
    )


def test_follow_refuses_a_cursor_that_is_not_an_int_at_the_call() -> None:
    with AgentHost(MemoryCheckpointStore()) as host:  # no cluster: the cursor is checked first
        with pytest.raises(TypeError, match=r"since must be an int .* got str 'a'"):
            host.follow("s", since="a")  # type: ignore[arg-type]
