"""An answer the worker cannot send to the host (text msgpack cannot carry) is a crash of
that session, reported at once, never a caller waiting out ``call_timeout``; the worker's
pipe stays readable for its other sessions, and the session comes back from its last
checkpoint without the turn.

Such text is escaped where it enters a session (``actors._storable``), so these tests
turn that off in the worker (``entry_escaping_off``) to reach the case it would miss."""

from __future__ import annotations

import time

import pytest

from actors import AgentTemplate
from supervisor import SessionCrashed
from tests.supervisor.host_helpers import MODES, WAIT, HostFactory, pairs, template
from tests.supervisor.workers.worker_tools import entry_escaping_off, undecodable_listing

pytestmark = pytest.mark.parametrize("mode", [m for m in MODES if m != "thread"])


@pytest.mark.parametrize("checkpoint_every", [1, None])
def test_an_unsendable_answer_crashes_its_session_at_once(
    make_host: HostFactory, checkpoint_every: int | None
) -> None:
    host = make_host(
        workers=1,
        call_timeout=60.0,
        checkpoint_every=checkpoint_every,
        worker_initializer=entry_escaping_off,
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
