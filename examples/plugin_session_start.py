"""Writing a plugin that survives resume: a guide by example.

A plugin keeps per-session data in ``ctx.state``. Plain values there (counts,
names, lists) are saved in every checkpoint and come back on resume. Live
values (connections, open files, locks) cannot be saved: the snapshot strips
them, lists their paths in ``stripped_fields``, and ``session_start`` -- which
runs on the first start *and* on every resume -- rebuilds them. The rule of
thumb: build live things only in ``session_start``, and make it idempotent.

Run: ``.venv/bin/python examples/plugin_session_start.py``
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Sequence

from actors import AgentTemplate, Message, Plugin, PluginContext
from supervisor import AgentHost, MemoryCheckpointStore


class Memory(Plugin):
    """Remembers every user message in an in-memory SQLite table (a live connection)."""

    name = "memory"

    def session_start(self, ctx: PluginContext) -> None:
        # Plain state: restored as it was saved (setdefault keeps it on resume).
        ctx.state.setdefault("remembered", [])
        # Live state: never in a checkpoint. On resume ctx.stripped says "conn".
        print(f"  session_start(resumed={ctx.resumed}, stripped={list(ctx.stripped)})")
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.executemany("INSERT INTO notes VALUES (?)", [(t,) for t in ctx.state["remembered"]])
        ctx.state["conn"] = conn

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        for message in messages:
            if message.role == "user" and message.content:
                ctx.state["remembered"].append(message.content)
                ctx.state["conn"].execute("INSERT INTO notes VALUES (?)", (message.content,))
        (count,) = ctx.state["conn"].execute("SELECT count(*) FROM notes").fetchone()
        ctx.emit("memory", rows=count)

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        ctx.state["conn"].close()  # runs on stop, hibernation and (best effort) crashes


def turn(host: AgentHost, text: str) -> None:
    cursor = host.events("guide").cursor
    host.send("guide", text)
    rows = [e.data["rows"] for e in host.events("guide", since=cursor).events if e.type == "memory"]
    print(f"  {text!r}: the rebuilt table now holds {rows[-1]} rows")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="  [log] %(message)s", stream=sys.stdout)
    logging.getLogger("pykka").setLevel(logging.CRITICAL)  # the traceback of our own kill
    template = AgentTemplate(model="echo", plugins=[Memory()])
    with AgentHost(store=MemoryCheckpointStore()) as host:
        print("first start:")
        host.start_session(template, session_id="guide")
        turn(host, "my name is Ada")
        turn(host, "I like graphs")

        print("after a crash (the supervisor resumes the session from its checkpoint):")
        host.kill("guide")
        turn(host, "what do you remember?")

        print("after a normal stop and an explicit resume:")
        host.stop_session("guide")
        host.resume("guide", template)
        turn(host, "still there?")


if __name__ == "__main__":
    main()
