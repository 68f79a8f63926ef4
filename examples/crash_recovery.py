"""Crash recovery, step by step: the main demo (``make demo``).

What it shows, on the embedded defaults (SQLite checkpoints, the offline EchoModel):

1. A host runs two sessions; each has a tool and a plugin holding a live
   resource (an open journal file) in its state.
2. One session is killed mid-conversation: the registry evicts it at once, the
   supervisor resumes it from its last checkpoint, the plugin reopens its file
   (it was stripped from the snapshot) and the conversation goes on.
3. The whole host process is killed with SIGKILL; a brand-new process on the
   same data directory resumes both sessions with their history.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from actors import AgentTemplate, Event, Plugin, PluginContext, ToolCall, tool
from supervisor import AgentHost, SessionNotFound

DATA_DIR = Path("sessionvisor-data") / "demo"


@tool
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: The text to count.
    """
    return len(text.split())


class Journal(Plugin):
    """Writes every tool call to a journal file it keeps open in its session state.

    The open file is a live value: snapshots strip it, and ``session_start``
    reopens it on every resume (``ctx.stripped`` says so).
    """

    def session_start(self, ctx: PluginContext) -> None:
        path = DATA_DIR / f"journal-{ctx.session_id}.txt"
        ctx.state["path"] = str(path)
        ctx.state.setdefault("entries", 0)
        if ctx.resumed:
            say(f"   [plugin] {ctx.session_id}: resumed; rebuilding stripped fields {ctx.stripped}")
        ctx.state["file"] = path.open("a", encoding="utf-8")

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> None:
        ctx.state["file"].write(f"{call.name}({call.arguments})\n")
        ctx.state["file"].flush()
        ctx.state["entries"] += 1

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        ctx.state["file"].close()


TEMPLATE = AgentTemplate(
    model="echo",
    tools=[word_count],
    instructions="You are a concise assistant.",
    plugins=[Journal()],
)


def say(text: str) -> None:
    print(text, flush=True)


def talk(host: AgentHost, session_id: str, text: str) -> None:
    answer = host.send(session_id, text)
    say(f"   {session_id} <- {text}")
    say(f"   {session_id} -> {answer.content}")


def first_life() -> None:
    """Phase 1 (its own process): converse, survive a session crash, then die hard."""
    host = AgentHost(data_dir=DATA_DIR)
    for sid, tenant in (("alice", "acme"), ("bob", "globex")):
        host.start_session(TEMPLATE, session_id=sid, tenant_id=tenant)
    say("\n1. Two sessions, each with a tool and a plugin holding an open file:")
    talk(host, "alice", "Hello, I am Alice.")
    talk(host, "bob", "Hi, Bob here.")
    talk(host, "alice", '/word_count {"text": "supervision trees keep agents alive"}')

    say("\n2. Killing alice mid-conversation (as an operator or a crash would):")
    resumed = threading.Event()

    def watch(event: Event) -> None:
        if event.type == "crashed":  # published right after eviction, before the restart
            try:
                host.registry.get("alice")
                say("   registry: alice is still listed?!")
            except SessionNotFound:
                say("   registry: alice evicted the moment her actor died")
        elif event.type == "resumed":
            resumed.set()

    host.subscribe("alice", watch)
    host.kill("alice", reason="demo crash")
    resumed.wait(10)
    entry = host.registry.get("alice")
    say(f"   supervisor: alice resumed from her last checkpoint (new actor {entry.actor_ref})")
    checkpoint = host.store.load("alice")
    say(f"   checkpoint: {checkpoint.checkpoint_id}, stripped {list(checkpoint.stripped_fields)}")
    talk(host, "alice", "Do you still remember me?")
    say(f"   alice's history survived: {len(host.history('alice'))} messages")
    talk(host, "bob", "Bob never noticed a thing.")

    say("\n3. Killing the whole host process with SIGKILL (no shutdown, no goodbye)...")
    os.kill(os.getpid(), signal.SIGKILL)


def second_life() -> None:
    """Phase 3 (a new process): resume everything from the same data directory."""
    with AgentHost(data_dir=DATA_DIR) as host:
        resumed = host.resume_all(TEMPLATE)
        say(f"   new process resumed {sorted(resumed)} from {DATA_DIR}")
        for info in host.list_sessions():
            say(f"   {info.session_id}: tenant {info.tenant_id}, {info.status}")
        talk(host, "alice", "We are back after a full restart.")
        talk(host, "bob", "Still here too.")
        for sid in ("alice", "bob"):
            history = host.history(sid)
            say(f"   {sid}: {len(history)} messages, first: {history[0].content!r}")
    say("\nDone: every answer given before each crash was still there afterwards.")


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="   [log] %(message)s", stream=sys.stdout)
    logging.getLogger("pykka").setLevel(logging.CRITICAL)  # tracebacks of the crashes we cause
    if len(sys.argv) > 1 and sys.argv[1] == "--first-life":
        first_life()
        return 1  # not reached: the process kills itself
    if len(sys.argv) > 1 and sys.argv[1] == "--second-life":
        second_life()
        return 0
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    me = [sys.executable, __file__]
    first = subprocess.run([*me, "--first-life"], check=False)
    say(f"   host process ended by signal {-first.returncode} (SIGKILL is {signal.SIGKILL})")
    say("\n4. Starting a brand-new host process on the same data directory:")
    return subprocess.run([*me, "--second-life"], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
