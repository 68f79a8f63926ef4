"""A host resumes what the previous version saved: ``tests/actors/fixtures/host_v1`` is a
data directory written before snapshot schema 2 (usage details), in every mode."""

from __future__ import annotations

import shutil
from pathlib import Path

from actors import AgentTemplate, Message, ModelResponse, ScriptedModel, Usage
from tests.supervisor.host_helpers import HostFactory, add

FIXTURE = Path(__file__).resolve().parent.parent / "actors" / "fixtures" / "host_v1"


def test_a_host_resumes_a_session_saved_before_schema_2(
    make_host: HostFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURE, data_dir)
    model = ScriptedModel([ModelResponse(Message.assistant("Still 42."), Usage(9, 2, 8, 1))])
    host = make_host(store=None, data_dir=data_dir)
    sid = host.resume("saved-v1", AgentTemplate(model=model, tools=[add]), tenant_id="acme")
    before = host.checkpoint(sid)
    assert before.schema_version == 2
    assert before.usage() == Usage(42, 12, 0, 0)
    assert host.send(sid, "And now?").content == "Still 42."
    history = host.history(sid)
    assert [m.content for m in history if m.role != "tool"] == [
        "What is 2 + 40?",
        None,
        "It is 42.",
        "And now?",
        "Still 42.",
    ]
    assert host.store.load(sid).usage() == Usage(51, 14, cached_input_tokens=8, reasoning_tokens=1)
