"""Input a checkpoint could not hold never enters a session: text with a lone surrogate is
refused before the turn starts, a ``str`` subclass becomes a plain ``str``, and a session
id that is not a ``str`` is refused before the store is asked about it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from actors import (
    AgentTemplate,
    Message,
    Plugin,
    PluginContext,
    ScriptedModel,
    Snapshot,
    SnapshotDecodeError,
    SnapshotEncodeError,
    ToolCall,
)
from supervisor import MemoryCheckpointStore
from tests.supervisor.host_helpers import HostFactory, pairs, template
from tests.supervisor.workers.worker_tools import undecodable_listing


class Shouting(str):
    """A ``str`` subclass with its own behaviour (what a caller might pass by accident)."""

    def upper(self) -> str:
        return "overridden"


def test_text_with_a_lone_surrogate_is_refused_before_the_turn(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), "s")
    host.send(sid, "fine")

    with pytest.raises(ValueError, match=r"lone surrogate at index 7 \('\\udcff'\)"):
        host.send(sid, "report-\udcff.txt")
    with pytest.raises(ValueError, match="the steering text holds a lone surrogate"):
        host.steer(sid, "\ud800")

    assert [e.type for e in host.events(sid).events].count("turn_started") == 1
    assert pairs(host.checkpoint(sid).messages()) == [("fine", "echo: fine")]
    assert host.send(sid, "still fine").content == "echo: still fine"


def test_a_str_subclass_becomes_plain_text(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), Shouting("shouty"))

    answer = host.send(sid, Shouting("hello"))

    assert answer.content == "echo: hello"
    assert [type(s.session_id) for s in host.list_sessions()] == [str]
    assert [type(m.content) for m in host.history(sid)] == [str, str]
    assert host.checkpoint(sid).messages()[0].content == "hello"


def test_a_session_id_that_is_not_text_is_refused_first(make_host: HostFactory) -> None:
    host = make_host()
    with pytest.raises(TypeError, match="session_id must be a str, got tuple"):
        host.start_session(template(), ("a", "b"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session_id must be a str, got int"):
        host.resume(7, template())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "state",
    [
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": "not a list of messages"},
        {"usage": "lots"},
        {"turns": "many"},
    ],
    ids=["bad-role", "messages-not-a-list", "usage-not-a-map", "turns-not-a-number"],
)
def test_a_checkpoint_with_the_wrong_shapes_is_a_decode_error(
    make_host: HostFactory, state: dict[str, object]
) -> None:
    store = MemoryCheckpointStore()
    store.save(Snapshot.new(session_id="s", state={"session_id": "s", **state}))
    host = make_host(store=store)

    with pytest.raises(SnapshotDecodeError, match="the checkpoint of session 's' is not a valid"):
        host.resume("s", template())

    assert host.list_sessions() == []
    store.save(Snapshot.new(session_id="s", state={"session_id": "s"}))
    host.resume("s", template())  # the next good checkpoint resumes
    assert host.send("s", "hi").content == "echo: hi"


def test_a_tool_result_with_undecodable_text_is_stored_escaped(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(AgentTemplate(tools=(undecodable_listing,)), "s")

    answer = host.send(sid, "/undecodable_listing {}")

    assert answer.content == "undecodable_listing returned: report-\\udcff.txt"
    assert host.history(sid)[-2].content == "report-\\udcff.txt"  # the tool message
    assert host.checkpoint(sid).messages() == host.history(sid)
    assert host.send(sid, "next").content == "echo: next"


def test_a_tool_argument_beyond_64_bits_is_an_error_for_the_model(make_host: HostFactory) -> None:
    call = ToolCall("c1", "add", {"a": 2**70, "b": 1})
    model = ScriptedModel([Message.assistant(None, tool_calls=(call,)), "done"])
    host = make_host()
    sid = host.start_session(template(model=model), "s")

    assert host.send(sid, "add them").content == "done"

    _, assistant, tool_message, _ = host.history(sid)
    assert assistant.tool_calls[0].arguments == {"a": str(2**70), "b": 1}
    assert tool_message.content is not None
    assert "argument 'a' is an integer beyond 64 bits" in tool_message.content
    assert host.checkpoint(sid).messages() == host.history(sid)


class Hoarder(Plugin):
    """Keeps a value in its state that no checkpoint can hold, on its first turn."""

    name = "hoarder"

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        if not ctx.state.get("done"):
            ctx.state["done"] = True
            loop: list[object] = []
            loop.append(loop)
            ctx.state["loop"] = loop


def test_plugin_state_no_checkpoint_can_hold_fails_the_turn_with_its_path(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sid = host.start_session(AgentTemplate(plugins=(Hoarder(),)), "s")

    with pytest.raises(SnapshotEncodeError, match=r"at state\.plugins\.hoarder: it holds a cycle"):
        host.send(sid, "one")

    assert host.history(sid) == []  # the turn was rolled back
    assert host.checkpoint(sid).state["plugins"]["hoarder"] == {}  # and so was the plugin's state


class Collector(Plugin):
    """Keeps a count in its state, and a set (which no checkpoint holds) when told to."""

    name = "collector"

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("seen", [])
        self.states = [*getattr(self, "states", []), ctx.state]  # one session per test

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        text = messages[0].content
        ctx.state["seen"].append(text)
        if text == "poison":
            ctx.state["tags"] = {"a", "b"}


@pytest.mark.parametrize("checkpoint_every", [1, None])
def test_a_turn_leaving_unstorable_plugin_state_is_undone_whatever_the_cadence(
    make_host: HostFactory, mode: str, checkpoint_every: int | None
) -> None:
    host = make_host(checkpoint_every=checkpoint_every)
    plugin = Collector()
    sid = host.start_session(AgentTemplate(plugins=(plugin,)), "s")
    host.send(sid, "one")

    with pytest.raises(SnapshotEncodeError, match=r"at state\.plugins\.collector\.tags"):
        host.send(sid, "poison")

    assert pairs(host.history(sid)) == [("one", "echo: one")]
    assert host.checkpoint(sid).state["plugins"]["collector"] == {"seen": ["one"]}
    if mode == "thread":  # the plugin's own ctx.state was restored in place
        assert plugin.states[0] == {"seen": ["one"]}
    host.send(sid, "two")
    assert host.checkpoint(sid).state["plugins"]["collector"] == {"seen": ["one", "two"]}
