"""Calls left unresolved by a shutdown: each awaiting task gets an error of its own.

Every pending call fails with ``HostShutDown``. One exception object shared by
all of them was raised in each awaiting task in turn, and a raise appends the
raising frames to the exception's traceback: the last task's traceback held
the frames of every other task (hundreds of lines for each ``logger.exception``,
and every one of those frames kept alive for as long as any task kept its error).
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from collections.abc import Sequence

import pytest

from actors import EchoModel, Message, ModelResponse, Tool
from supervisor import AgentHost, AsyncAgentHost, HostShutDown, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT, template

WAITERS = 20


class HeldModel(EchoModel):
    """``EchoModel`` whose calls wait (bounded) until ``release`` is set."""

    model_string = "held-echo"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.entered.set()
        self.release.wait(WAIT)
        return super().generate(messages, tools)


def test_each_task_left_waiting_at_shutdown_gets_its_own_error() -> None:
    model = HeldModel()
    host = AgentHost(store=MemoryCheckpointStore(), call_timeout=0.3)
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template(model=model))

    async def main() -> list[HostShutDown]:
        held = asyncio.create_task(ahost.send(sid, "held", timeout=WAIT))
        assert await asyncio.to_thread(model.entered.wait, WAIT)
        queued = [
            asyncio.create_task(ahost.send(sid, f"queued {n}", timeout=WAIT))
            for n in range(WAITERS)
        ]
        await asyncio.sleep(0)  # one loop iteration: each queued task makes its call
        await ahost.shutdown()  # the held turn outlives call_timeout: abandoned
        errors = []
        for task in [held, *queued]:
            with pytest.raises(HostShutDown) as failed:
                await task
            errors.append(failed.value)
        return errors

    try:
        errors = asyncio.run(main())
    finally:
        model.release.set()
    assert len({id(error) for error in errors}) == len(errors)
    depths = {len(traceback.extract_tb(error.__traceback__)) for error in errors}
    assert len(depths) == 1, f"tracebacks of different depths: {sorted(depths)}"
