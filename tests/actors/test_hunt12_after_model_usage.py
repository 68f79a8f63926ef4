"""A ``model_response`` event carries the tokens the model call spent, whatever an
``after_model`` hook returns, found by a bug hunt.

The session counts the usage of the model's own response (``usage()``), but published the
``model_response`` event with the usage of the response an ``after_model`` hook put in its
place. A host sums those events for ``SessionInfo.usage`` (per tenant, for quotas and
bills): a plugin that rewrites the answer (``ModelResponse(new_message)``, whose usage is
zero by default) made every call it rewrote free there, while the session's own count
said otherwise. A replacement whose ``usage`` was not a ``Usage`` (``None``) failed the
turn with ``'NoneType' object has no attribute 'to_dict'``, naming neither plugin nor hook,
where a hook's mistake must never fail a turn. The event now carries the model's usage.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    ScriptedModel,
    Usage,
)

WAIT = 5.0
SPENT = Usage(10, 5)


class Rewrites(Plugin):
    """Replaces every answer with one of its own, of the given ``usage``."""

    name = "rewrites"

    def __init__(self, usage: Any) -> None:
        self.usage = usage

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse:
        return ModelResponse(Message.assistant("rewritten"), self.usage)


@pytest.mark.parametrize("usage", [Usage(), Usage(999, 999), None], ids=repr)
def test_the_event_carries_what_the_model_spent(usage: Any) -> None:
    model = ScriptedModel([ModelResponse(Message.assistant("original"), SPENT)] * 2)
    ref = AgentSession.start(AgentTemplate(model=model, plugins=[Rewrites(usage)]))
    proxy = ref.proxy()
    try:
        assert proxy.send("one").get(timeout=WAIT).content == "rewritten"
        assert proxy.send("two").get(timeout=WAIT).content == "rewritten"
        events = proxy.events().get(timeout=WAIT).events
        counted = proxy.usage().get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
    published = [e.data["usage"] for e in events if e.type == "model_response"]
    assert published == [SPENT.to_dict(), SPENT.to_dict()]
    assert counted == SPENT + SPENT  # what the events sum to, as a host sums them
    assert not [e for e in events if e.type in ("error", "plugin_error")]
