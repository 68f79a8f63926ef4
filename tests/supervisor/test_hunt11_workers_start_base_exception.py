"""A ``SystemExit`` or ``KeyboardInterrupt`` while a session is constructed answers the start.

The worker runs a start on a small thread pool and answered it with the error
when constructing the session raised an ``Exception``, but not when user code
run there (a model's attribute, looked up as the session is built) raised a
``BaseException``: the start was never answered, the host's ``start_session``
waited out its ``call_timeout``, and the sessions' supervisor stayed busy with
that start, so later starts timed out too. Now the start fails at once with a
``RemoteError`` naming the exception, and the worker goes on serving.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from actors import AgentTemplate, EchoModel
from supervisor import AgentHost, MemoryCheckpointStore, RemoteError
from tests.supervisor.host_helpers import template

_CALL_TIMEOUT = 30.0
"""The host's ``call_timeout``: what an unanswered start used to wait out."""


class ExitInWorker(EchoModel):
    """A model that raises ``error`` when a worker process builds a session on it (the
    host checks the template in its own process first, where it behaves)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.parent = os.getpid()
        self.error = error

    @property
    def respond(self) -> None:
        if os.getpid() != self.parent:
            raise self.error


@pytest.fixture
def host() -> Iterator[AgentHost]:
    made = AgentHost(MemoryCheckpointStore(), workers=1, call_timeout=_CALL_TIMEOUT)
    yield made
    made.shutdown()


@pytest.mark.parametrize(
    ("error", "name"),
    [(SystemExit(3), "SystemExit"), (KeyboardInterrupt(), "KeyboardInterrupt")],
)
def test_a_base_exception_while_a_session_is_built_fails_its_start_at_once(
    host: AgentHost, error: BaseException, name: str
) -> None:
    pid = host.workers()[0].pid

    with pytest.raises(RemoteError) as caught:
        host.start_session(AgentTemplate(model=ExitInWorker(error)), "bad")

    assert caught.value.type_name == name
    assert "bad" not in [info.session_id for info in host.list_sessions()]
    # The worker and the host's supervisor go on: the next start is not stuck behind it.
    sid = host.start_session(template(), "fine")
    assert host.send(sid, "hi").content == "echo: hi"
    assert [w.pid for w in host.workers()] == [pid]
