"""``actors.current_step()``: the idempotency key tools and plugin hooks read during a turn."""

from __future__ import annotations

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    Plugin,
    PluginContext,
    ScriptedModel,
    StepKey,
    ToolCall,
    current_step,
    tool,
)

WAIT = 5.0


class Recorder(Plugin):
    """Records the key each hook saw, in the order the hooks ran."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, StepKey | None]] = []

    def session_start(self, ctx: PluginContext) -> None:
        self.seen.append(("session_start", current_step()))

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> None:
        self.seen.append(("on_tool_call", current_step()))

    def after_turn(self, ctx: PluginContext, messages: object) -> None:
        self.seen.append(("after_turn", current_step()))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def test_each_step_of_each_turn_has_its_key(recorder: Recorder) -> None:
    seen_by_tool: list[StepKey | None] = []

    @tool
    def charge(amount: int) -> str:
        """Charge an amount, once per key."""
        seen_by_tool.append(current_step())
        return "ok"

    call = ToolCall("c1", "charge", {"amount": 5})
    model = ScriptedModel([Message.assistant(None, (call,)), "charged", "second turn"])
    template = AgentTemplate(model=model, tools=(charge,), plugins=(recorder,))
    ref = AgentSession.start(template, session_id="s", epoch=7)
    try:
        proxy = ref.proxy()
        assert proxy.send("charge 5").get(timeout=WAIT).content == "charged"
        assert proxy.send("again").get(timeout=WAIT).content == "second turn"
    finally:
        ref.stop()
    assert seen_by_tool == [StepKey("s", 7, 1, 1)]
    assert recorder.seen == [
        ("session_start", None),
        ("on_tool_call", StepKey("s", 7, 1, 1)),
        ("after_turn", None),  # the steps are over
        ("after_turn", None),
    ]
    assert current_step() is None  # another thread's steps are not this one's
    assert str(StepKey("s", 7, 1, 2)) == "s:7:1:2"


def test_a_session_outside_a_cluster_has_epoch_zero() -> None:
    keys: list[StepKey | None] = []

    @tool
    def probe() -> str:
        """Report the key."""
        keys.append(current_step())
        return "ok"

    model = ScriptedModel([Message.assistant(None, (ToolCall("c", "probe", {}),)), "done"])
    ref = AgentSession.start(AgentTemplate(model=model, tools=(probe,)), session_id="t")
    try:
        ref.proxy().send("go").get(timeout=WAIT)
    finally:
        ref.stop()
    assert keys == [StepKey("t", 0, 1, 1)]
