"""A non-blocking call naming a session a host alone does not have fails at once.

Only a cluster node may take such a session over (it asks the database who owns it,
and may resume it there and then), which is why ``host.futures`` hands the look-up of
an unknown id to a helper thread there. The host installed that take-over hook on
every host, though a host alone never takes anything over, so every call naming an
unknown id (a gateway's 404, say) went through a helper thread (and an
``AsyncAgentHost`` event stream's subscription through an executor thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from supervisor import AgentHost, AsyncAgentHost, MemoryCheckpointStore, SessionNotFound


@pytest.fixture
def host() -> Iterator[AgentHost]:
    with AgentHost(store=MemoryCheckpointStore()) as opened:
        yield opened


def test_a_host_alone_finds_an_unknown_id_at_once(host: AgentHost) -> None:
    assert host.futures.finds_at_once("nobody")


@pytest.mark.parametrize("call", ["send", "history", "steer"])
def test_a_futures_call_naming_an_unknown_id_fails_with_session_not_found(
    host: AgentHost, call: str
) -> None:
    args = {"send": ("nobody", "hello"), "history": ("nobody",), "steer": ("nobody", "left")}
    future = getattr(host.futures, call)(*args[call])
    with pytest.raises(SessionNotFound, match="nobody"):
        future.result(timeout=5)


def test_an_awaited_send_to_an_unknown_id_raises_session_not_found(host: AgentHost) -> None:
    ahost = AsyncAgentHost(host)

    async def send() -> str:
        try:
            await ahost.send("nobody", "hello")
        except SessionNotFound as exc:
            return str(exc)
        return "no error"

    assert "nobody" in asyncio.run(send())
