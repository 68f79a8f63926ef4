"""README, "Async and non-blocking calls": ``host.futures`` calls raise invalid
arguments as ``TypeError``/``ValueError`` at the call, as the blocking form does
("Arguments are checked at the call ... in every form").

A ``session_id`` that is not a ``str`` was not: ``send``, ``history``,
``checkpoint``, ``steer``, ``hibernate`` and ``stop_session`` returned a future that
failed with the ``TypeError`` (``start_session`` and ``resume`` raised it at the
call). ``session_info``, which answers at once, raised ``SessionNotFound`` for it
where every other call names the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from actors import AgentTemplate
from supervisor import AgentHost, HostFutures, MemoryCheckpointStore

NOT_AN_ID: Any = 5

CALLS: dict[str, Callable[[HostFutures], Future[Any]]] = {
    "send": lambda futures: futures.send(NOT_AN_ID, "hello"),
    "history": lambda futures: futures.history(NOT_AN_ID),
    "checkpoint": lambda futures: futures.checkpoint(NOT_AN_ID),
    "steer": lambda futures: futures.steer(NOT_AN_ID, "note"),
    "hibernate": lambda futures: futures.hibernate(NOT_AN_ID),
    "stop_session": lambda futures: futures.stop_session(NOT_AN_ID),
}


@pytest.fixture
def host() -> Any:
    with AgentHost(store=MemoryCheckpointStore()) as serving:
        serving.start_session(AgentTemplate(model="echo"), session_id="s1")
        yield serving


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_a_future_call_refuses_a_session_id_that_is_no_str_at_the_call(
    host: AgentHost, call: Callable[[HostFutures], Future[Any]]
) -> None:
    with pytest.raises(TypeError, match="session_id"):
        call(host.futures)


def test_session_info_names_a_session_id_that_is_no_str(host: AgentHost) -> None:
    with pytest.raises(TypeError, match="session_id"):
        host.session_info(NOT_AN_ID)
