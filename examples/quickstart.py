"""A first session: a tool, a plugin, and a short conversation, all offline.

Run with ``make demo DEMO=examples/quickstart.py`` (or ``.venv/bin/python
examples/quickstart.py``; plain ``make demo`` runs ``crash_recovery.py``).
The embedded ``EchoModel`` answers with your text, and when a message reads
``/<tool> {json arguments}`` it calls that tool first, so you can watch a
tool-calling turn without any network or API key.
"""

from __future__ import annotations

from actors import AgentSession, AgentTemplate, Event, Plugin, PluginContext, ToolCall, tool


@tool
def convert_temperature(celsius: float) -> str:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: Degrees Celsius.
    """
    return f"{celsius * 9 / 5 + 32:.1f} F"


class ToolAudit(Plugin):
    """Counts tool calls per session in its persisted state and announces each one."""

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("tool_calls", 0)

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> None:
        ctx.state["tool_calls"] += 1
        ctx.emit("audit", note=f"tool call #{ctx.state['tool_calls']}: {call.name}")


def show(event: Event) -> None:
    """Print the events a newcomer cares about, as they happen."""
    if event.type == "tool_call":
        print(f"    [tool call]   {event.data['name']}({event.data['arguments']})")
    elif event.type == "tool_result":
        print(f"    [tool result] {event.data['content']}")
    elif event.type == "audit":
        print(f"    [plugin]      {event.data['note']}")


def main() -> None:
    template = AgentTemplate(
        model="echo",
        tools=[convert_temperature],
        instructions="You are a helpful assistant.",
        plugins=[ToolAudit()],
    )
    ref = AgentSession.start(template, session_id="quickstart")
    session = ref.proxy()
    session.subscribe(show).get(timeout=5)
    try:
        for text in ["Hello there!", '/convert_temperature {"celsius": 21.5}', "Thanks!"]:
            print(f"user:      {text}")
            answer = session.send(text).get(timeout=10)
            print(f"assistant: {answer.content}\n")
        state = session.state().get(timeout=5)
        usage = session.usage().get(timeout=5)
        print(f"turns: {state['turns']}, messages: {len(state['messages'])}, tokens: {usage.total}")
        print(f"plugin state (persisted with the session): {state['plugins']}")
    finally:
        ref.stop()


if __name__ == "__main__":
    main()
