"""A template's instructions are text every checkpoint can hold, found by a bug hunt: they
are part of every session's state, and instructions with a lone surrogate (text read from
a file with ``errors="surrogateescape"``) made a template whose bare sessions answered
but produced snapshots no store could serialize, and on which no host could start a
session; instructions that were not text went into every prompt as they were."""

from __future__ import annotations

from typing import Any, cast

import pytest

from actors import AgentSession, AgentTemplate, Snapshot

WAIT = 5.0


def test_instructions_with_a_lone_surrogate_are_refused_naming_them() -> None:
    with pytest.raises(
        ValueError, match="template's instructions holds a lone surrogate at index 5"
    ):
        AgentTemplate(model="echo", instructions="read \udcff")


@pytest.mark.parametrize("instructions", [5, b"be brief", ["be brief"]])
def test_instructions_that_are_not_text_are_refused(instructions: object) -> None:
    with pytest.raises(TypeError, match="instructions must be a str or None"):
        AgentTemplate(model="echo", instructions=cast(Any, instructions))


def test_good_instructions_reach_a_checkpoint_that_serializes() -> None:
    class Brief(str):
        """A ``str`` subclass: taken as plain text."""

    template = AgentTemplate(model="echo", instructions=Brief("be brief \u00e9"))
    assert type(template.instructions) is str
    saved: list[Snapshot] = []
    ref = AgentSession.start(template, checkpointer=saved.append)
    try:
        ref.proxy().send("hi").get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    restored = Snapshot.deserialize(saved[-1].serialize())
    assert restored.state["instructions"] == "be brief \u00e9"
