"""A plugin whose name is not a str is refused by the template, found by a bug
hunt.

A plugin's name keys its state in every checkpoint (``state.plugins.<name>``). A plugin
whose constructor set ``self.name`` to something else (``None``, an ``int``, a tuple) was
taken by ``AgentTemplate``, and every session on the template then failed to start with
``TypeError: object of type 'int' has no len()`` (or a ``PluginError`` naming plugin
``'?'``), naming neither the plugin nor its name. Now the template refuses it, naming the
plugin, as it refuses a plugin that is not a ``Plugin``.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import AgentSession, AgentTemplate, Plugin, PluginContext, ScriptedModel

WAIT = 5.0


class Named(Plugin):
    """A plugin whose constructor sets its name (one per server, say)."""

    def __init__(self, name: Any) -> None:
        self.name = name

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state["started"] = True


@pytest.mark.parametrize("name", [5, None, ("t",), b"db"], ids=repr)
def test_a_plugin_name_that_is_not_a_str_is_refused(name: Any) -> None:
    with pytest.raises(TypeError, match=r"plugin Named: its name must be a str"):
        AgentTemplate(plugins=[Named(name)])


def test_a_plugin_name_no_checkpoint_could_hold_is_refused() -> None:
    with pytest.raises(ValueError, match=r"lone surrogate"):
        AgentTemplate(plugins=[Named("db-\udcff")])


def test_a_named_plugin_still_starts() -> None:
    ref = AgentSession.start(AgentTemplate(model=ScriptedModel(["a"]), plugins=[Named("db")]))
    try:
        state = ref.proxy().state().get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert state["plugins"] == {"db": {"started": True}}
