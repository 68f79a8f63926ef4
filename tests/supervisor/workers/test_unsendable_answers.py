"""An answer the worker cannot send to the host (text msgpack cannot carry) is a crash of
that session, reported at once, never a caller waiting out ``call_timeout``; the worker's
pipe stays readable for its other sessions, and the session comes back from its last
checkpoint without the turn.

Such text is escaped where it enters a session (``actors._storable``), so these tests
turn that off in the worker (``entry_escaping_off``) to reach the case it would miss."""

from __future__ import annotations

import time

import pytest

from actors import AgentTemplate, SnapshotEncodeError
from supervisor import SessionCrashed
from tests.supervisor.host_helpers import MODES, WAIT, HostFactory, pairs, template
from tests.supervisor.workers.worker_tools import entry_escaping_off, undecodable_listing

pytestmark = pytest.mark.parametrize("mode", [m for m in MODES if m != "thread"])


def test_an_unsendable_answer_crashes_its_session_at_once(make_host: HostFactory) -> None:
    host = make_host(
        workers=1, call_timeout=60.0, checkpoint_every=None, worker_initializer=entry_escaping_off
    )
    poisoned = host.start_session(AgentTemplate(tools=(undecodable_listing,)), "poisoned")
    neighbour = host.start_session(template(), "neighbour")
    host.send(poisoned, "before")
    host.checkpoint(poisoned)
    started = time.monotonic()

    with pytest.raises(SessionCrashed, match="surrogates not allowed"):
        host.send(poisoned, "/undecodable_listing {}")

    assert time.monotonic() - started < WAIT  # not call_timeout
    assert host.send(neighbour, "still served").content == "echo: still served"
    assert host.send(poisoned, "after").content == "echo: after"
    assert [user for user, _ in pairs(host.history(poisoned))] == ["before", "after"]
    types = [e.type for e in host.events(poisoned).events]
    assert "tool_result" in types  # the dying turn's events reached the stream, escaped


def test_an_error_with_unsendable_text_is_sent_escaped(make_host: HostFactory) -> None:
    """The turn's checkpoint cannot be taken (its history holds the raw text): the caller
    gets that error, escaped, at once; the turn is rolled back and the session goes on."""
    host = make_host(workers=1, call_timeout=60.0, worker_initializer=entry_escaping_off)
    sid = host.start_session(AgentTemplate(tools=(undecodable_listing,)), "s")
    host.send(sid, "before")

    with pytest.raises(SnapshotEncodeError, match=r"\\udcff"):
        host.send(sid, "/undecodable_listing {}")

    assert host.send(sid, "after").content == "echo: after"
    assert [user for user, _ in pairs(host.history(sid))] == ["before", "after"]
