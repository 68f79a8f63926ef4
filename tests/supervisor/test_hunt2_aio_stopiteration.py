"""``AsyncAgentHost``: a model's ``StopIteration`` (``next`` on an exhausted iterator, as a
scripted model does) reaches the awaiting task; it used to leave the task waiting forever,
because asyncio refuses to hold a ``StopIteration`` on a future. Thread and worker mode."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pytest

from actors import AgentTemplate, Message, ModelResponse, Tool, Usage
from supervisor import AsyncAgentHost
from tests.supervisor.host_helpers import WAIT, HostFactory


class Scripted:
    """Answers from a script of one reply, then ``next`` on the spent script raises."""

    model_string = "scripted"

    def __init__(self) -> None:
        self._replies: Iterator[str] = iter(["the only reply"])

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        return ModelResponse(Message.assistant(next(self._replies)), Usage(1, 1))


def test_a_models_stop_iteration_reaches_the_awaiting_task(make_host: HostFactory) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)

    async def main() -> None:
        sid = await ahost.start_session(AgentTemplate(model=Scripted()), "s")
        assert (await ahost.send(sid, "one")).content == "the only reply"
        # A coroutine cannot raise StopIteration: Python makes it a RuntimeError whose
        # cause is the model's StopIteration. The task must get that, not wait forever.
        with pytest.raises(RuntimeError) as raised:
            await asyncio.wait_for(ahost.send(sid, "two"), WAIT)
        assert isinstance(raised.value.__cause__, StopIteration)
        # the failed turn was rolled back; the session still answers its other calls
        history = await asyncio.wait_for(ahost.history(sid), WAIT)
        assert [m.content for m in history] == ["one", "the only reply"]

    asyncio.run(main())
