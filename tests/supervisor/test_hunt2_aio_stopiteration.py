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


class EndsAsyncIteration:
    """Raises ``StopAsyncIteration``, as a model draining an async iterator by hand may."""

    model_string = "ends-async-iteration"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        raise StopAsyncIteration


def test_a_models_stop_async_iteration_does_not_end_the_callers_iteration(
    make_host: HostFactory,
) -> None:
    """Raised as is into an ``__anext__`` awaiting the call, it silently ended the caller's
    ``async for``; it arrives as a ``RuntimeError`` caused by it, as ``StopIteration`` does."""
    host = make_host()
    ahost = AsyncAgentHost(host)

    class Answers:
        def __init__(self, sid: str) -> None:
            self.sid = sid
            self.left = 2

        def __aiter__(self) -> Answers:
            return self

        async def __anext__(self) -> str:
            if not self.left:
                raise StopAsyncIteration
            self.left -= 1
            return (await ahost.send(self.sid, "hi")).content or ""

    async def main() -> None:
        sid = await ahost.start_session(AgentTemplate(model=EndsAsyncIteration()), "s")
        with pytest.raises(RuntimeError) as raised:
            async for _ in Answers(sid):
                pass
        assert isinstance(raised.value.__cause__, StopAsyncIteration)

    asyncio.run(main())
