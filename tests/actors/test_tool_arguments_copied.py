"""A tool that changes an argument in place (appends to a list it was given) changed the
model's own call as the history holds it: the live history and the checkpoint, whose
message bytes are encoded once when appended, then disagreed. A tool gets copies."""

from __future__ import annotations

from actors import AgentSession, AgentTemplate, Message, ScriptedModel, Snapshot, ToolCall, tool

WAIT = 10


@tool
def tag_all(items: list[str], extra: dict[str, list[int]]) -> str:
    """Tag every item."""
    items.append("tagged")
    extra["seen"].append(1)
    return ",".join(items)


def test_a_tool_changing_its_arguments_leaves_the_models_call_as_it_was() -> None:
    arguments = {"items": ["a", "b"], "extra": {"seen": []}}
    model = ScriptedModel(
        [Message.assistant(None, (ToolCall("c1", "tag_all", arguments),)), "done"]
    )
    ref = AgentSession.start(AgentTemplate(model=model, tools=[tag_all]))
    try:
        proxy = ref.proxy()
        assert proxy.send("go").get(timeout=WAIT).content == "done"
        history = proxy.history().get(timeout=WAIT)
        snapshot = proxy.snapshot().get(timeout=WAIT)
    finally:
        ref.stop()

    asked = next(m for m in history if m.tool_calls).tool_calls[0].arguments
    assert asked == {"items": ["a", "b"], "extra": {"seen": []}}
    assert next(m for m in history if m.role == "tool").content == "a,b,tagged"
    saved = Snapshot.deserialize(snapshot.serialize()).messages()
    assert saved == history
