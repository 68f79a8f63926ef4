"""A plugin state shaped like a stripped marker is refused, found by a bug hunt.

A checkpoint writes a stripped value as the marker ``{"__stripped__": "<type>"}``, and a
plugin state that is exactly one is read on resume as a state that was stripped whole:
the plugin starts afresh. A plugin's own ``ctx.state`` of that shape (its only key
``"__stripped__"``, a ``str`` value) was saved as it was and wiped on resume, silently.
The stored form cannot tell the two apart, so the key is reserved: such a state now fails
where it is made, naming the plugin's path (``SnapshotEncodeError``), as a state no
checkpoint can hold does. A marker a resume meets is still read as before.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Plugin,
    PluginContext,
    PluginError,
    Snapshot,
    SnapshotEncodeError,
)

WAIT = 5.0


class Sets(Plugin):
    """Sets ``ctx.state`` to ``value`` at start, or after its first turn."""

    name = "sets"

    def __init__(self, value: dict[str, Any], *, at_start: bool) -> None:
        self.value = value
        self.at_start = at_start
        self.seen: list[dict[str, Any]] = []

    def session_start(self, ctx: PluginContext) -> None:
        self.seen.append(dict(ctx.state))
        if self.at_start:
            ctx.state.update(self.value)

    def after_turn(self, ctx: PluginContext, messages: Any) -> None:
        ctx.state.clear()
        ctx.state.update(self.value)


_MARKER_SHAPED = {"__stripped__": "my own value"}


def test_a_marker_shaped_state_fails_the_start() -> None:
    with pytest.raises(PluginError) as caught:
        AgentSession.start(
            AgentTemplate(model="echo", plugins=[Sets(_MARKER_SHAPED, at_start=True)])
        )
    assert caught.value.plugin == "sets"
    assert isinstance(caught.value.error, SnapshotEncodeError)
    assert caught.value.error.path == "state.plugins.sets"
    assert "__stripped__" in str(caught.value.error)


def test_a_turn_that_leaves_a_marker_shaped_state_is_rolled_back() -> None:
    plugin = Sets(_MARKER_SHAPED, at_start=False)
    ref = AgentSession.start(AgentTemplate(model="echo", plugins=[plugin]))
    proxy = ref.proxy()
    try:
        with pytest.raises(SnapshotEncodeError, match=r"state\.plugins\.sets.*__stripped__"):
            proxy.send("one").get(timeout=WAIT)
        assert proxy.history().get(timeout=WAIT) == []
        assert proxy.snapshot().get(timeout=WAIT).state["plugins"]["sets"] == {}
    finally:
        ref.stop()


def test_the_key_is_fine_beside_others_and_survives_a_resume() -> None:
    value = {"__stripped__": "mine", "other": 1}
    ref = AgentSession.start(AgentTemplate(model="echo", plugins=[Sets(value, at_start=True)]))
    try:
        snapshot = Snapshot.deserialize(ref.proxy().snapshot().get(timeout=WAIT).serialize())
    finally:
        ref.stop()
    plugin = Sets({}, at_start=True)
    again = AgentSession.start(
        AgentTemplate(model="echo", plugins=[plugin]),
        restored_state=snapshot.state,
        stripped_fields=snapshot.stripped_fields,
    )
    again.stop()
    assert plugin.seen == [value]


def test_a_stripped_whole_state_in_a_checkpoint_still_starts_afresh() -> None:
    plugin = Sets({}, at_start=True)
    ref = AgentSession.start(
        AgentTemplate(model="echo", plugins=[plugin]),
        restored_state={"plugins": {"sets": {"__stripped__": "secret"}}},
        stripped_fields=("plugins.sets",),
    )
    ref.stop()
    assert plugin.seen == [{}]
