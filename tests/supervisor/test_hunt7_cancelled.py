"""Under an ``AgentHost``, a model or plugin hook that raises ``asyncio.CancelledError`` fails
as an ``Exception`` would, found by a bug hunt: the exception (a ``BaseException``) crashed
the session, so the send raised ``SessionCrashed`` and the session was restarted. Now the
model's fails the turn with ``ModelCallAborted`` and the hook's is a ``plugin_error``; the
session is not restarted, in a worker process as in a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from actors import (
    EchoModel,
    Message,
    ModelCallAborted,
    ModelResponse,
    Plugin,
    PluginContext,
    Tool,
)
from tests.supervisor.host_helpers import HostFactory, pairs, same_error, template


class Cancelling(EchoModel):
    """``EchoModel`` that raises ``CancelledError`` for user text ``!cancel``."""

    model_string = "cancelling-echo"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        if messages[-1].content == "!cancel":
            raise asyncio.CancelledError("request cancelled")
        return super().generate(messages, tools)


class CancellingHook(Plugin):
    """Its ``after_turn`` raises ``CancelledError``."""

    name = "cancelling"

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        raise asyncio.CancelledError("hook cancelled")


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_model_raising_cancelled_error_fails_the_turn_only(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(model=Cancelling()), "cancelled-model")
    ref = host.registry.get(sid).actor_ref
    host.send(sid, "one")
    cursor = host.events(sid).cursor

    with pytest.raises(Exception, match="CancelledError") as raised:
        host.send(sid, "!cancel")

    assert same_error(raised.value, ModelCallAborted)
    types = [e.type for e in host.events(sid, since=cursor).events]
    assert types == ["turn_started", "error"]
    assert host.registry.get(sid).actor_ref is ref  # not restarted
    assert host.send(sid, "two").content == "echo: two"
    assert pairs(host.history(sid)) == [("one", "echo: one"), ("two", "echo: two")]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_hook_raising_cancelled_error_is_a_plugin_error(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(plugins=[CancellingHook()]), "cancelled-hook")
    ref = host.registry.get(sid).actor_ref

    assert host.send(sid, "hi").content == "echo: hi"

    events = host.events(sid).events
    (failed,) = [e for e in events if e.type == "plugin_error"]
    assert (failed.data["hook"], failed.data["plugin"]) == ("after_turn", "cancelling")
    assert "CancelledError" in failed.data["error"]
    assert events[-1].type == "turn_finished"
    assert host.registry.get(sid).actor_ref is ref  # not restarted
