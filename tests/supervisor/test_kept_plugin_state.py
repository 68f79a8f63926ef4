"""A plugin taken out of the template for a while loses nothing: its saved state is kept
through every resume, reactivation and crash restart on a template without it, and its
``session_start`` finds that state again when a template lists it once more, in every
runtime (the session code is the same in a worker)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors import AgentTemplate, Message, Plugin, PluginContext
from supervisor import AgentHost, SQLiteCheckpointStore
from tests.supervisor.host_helpers import HostFactory, watch_events

BIG = "n" * 5000  # over the SQLite store's 4 KiB: the state is stored as a shared part


class Notes(Plugin):
    """Appends each turn's user text to its notes; holds a live lock beside them (stripped
    from checkpoints); records what its ``session_start`` found, in its own state."""

    def session_start(self, ctx: PluginContext) -> None:
        found = {k: v for k, v in ctx.state.items() if k != "started_with"}
        ctx.state["started_with"] = {
            "state": copy.deepcopy(found),
            "resumed": ctx.resumed,
            "stripped": list(ctx.stripped),
        }
        ctx.state.setdefault("notes", [BIG])
        ctx.state["lock"] = threading.Lock()

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["notes"].append(messages[0].content)


class Turns(Plugin):
    """Counts turns: the plugin every template has."""

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("turns", 0)

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["turns"] += 1


def _kept_events(host: AgentHost, sid: str) -> list[dict[str, Any]]:
    return [e.data for e in host.events(sid).events if e.type == "plugin_state_kept"]


def test_a_removed_plugin_gets_its_state_back_when_it_returns(
    make_host: HostFactory, tmp_path: Path
) -> None:
    with_notes = AgentTemplate(plugins=(Notes(), Turns()))
    without = AgentTemplate(plugins=(Turns(),))
    store = SQLiteCheckpointStore(tmp_path / "checkpoints.db")
    host = make_host(store=store)
    sid = host.start_session(with_notes, "s")
    host.send(sid, "one")
    host.stop_session(sid)
    saved = store.load(sid)
    notes = saved.state["plugins"]["notes"]
    assert notes["notes"] == [BIG, "one"]
    notes_paths = [p for p in saved.stripped_fields if p.startswith("plugins.notes.")]
    assert notes_paths == ["plugins.notes.lock"]

    host.resume(sid, without)  # a deploy took the plugin out
    host.send(sid, "two")  # queued behind the start: its event is in before the answer
    assert _kept_events(host, sid) == [{"plugins": ["notes"]}]
    assert host.hibernate(sid)
    host.send(sid, "three")  # reactivated on the same template, without the plugin
    events = watch_events(host, sid)
    host.kill(sid)  # a crash: restarted from the last checkpoint, still without it
    events.wait_for("resumed")
    host.send(sid, "four")
    assert _kept_events(host, sid) == [{"plugins": ["notes"]}] * 3
    checkpoint = host.checkpoint(sid)
    host.stop_session(sid)
    for later in (checkpoint, store.load(sid)):
        assert list(later.state["plugins"]) == ["turns", "notes"]
        assert later.state["plugins"]["notes"] == notes  # unchanged, markers and all
        assert [p for p in later.stripped_fields if p.startswith("plugins.notes.")] == notes_paths
    assert store.load(sid).state["plugins"]["turns"]["turns"] == 4

    host.resume(sid, with_notes)  # the plugin is back
    host.send(sid, "five")
    back = host.checkpoint(sid).state["plugins"]["notes"]
    assert back["started_with"] == {
        "state": {"notes": [BIG, "one"], "lock": {"__stripped__": "_thread.lock"}},
        "resumed": True,
        "stripped": ["lock"],
    }
    assert back["notes"] == [BIG, "one", "five"]
    assert _kept_events(host, sid) == []  # nothing kept any more: nothing said
    host.shutdown()
    store.close()
