"""Redaction found by a bug hunt: ``strip_secrets`` judges what a plugin keeps, never the
plugin's name, which only keys its state."""

from __future__ import annotations

from actors import AgentSession, AgentTemplate, Plugin, PluginContext, Snapshot, strip_secrets

MARKER = {"__stripped__": "secret"}


def test_strip_secrets_keeps_the_state_of_a_plugin_whose_name_looks_like_a_secret() -> None:
    state = {
        "plugins": {
            "token_budget": {"spent": 20, "api_key": "x"},
            "password_policy": {"min_length": 12},
            "secrets": {"vault_url": "https://vault.local"},
        },
        "provider_state": None,
        "metadata": {},
    }
    snapshot = Snapshot.new(session_id="s", state=state)

    stripped = strip_secrets(snapshot)

    assert stripped.state["plugins"] == {
        "token_budget": {"spent": 20, "api_key": MARKER},
        "password_policy": {"min_length": 12},
        "secrets": {"vault_url": "https://vault.local"},
    }
    assert stripped.stripped_fields == ("plugins.token_budget.api_key",)
    assert snapshot.state["plugins"]["token_budget"] == {"spent": 20, "api_key": "x"}
    clean = Snapshot.new(session_id="s", state={"plugins": {"token_budget": {"spent": 1}}})
    assert strip_secrets(clean) is clean


def test_a_plugin_whose_whole_state_an_old_checkpoint_stripped_starts_afresh() -> None:
    class TokenBudget(Plugin):
        def session_start(self, ctx: PluginContext) -> None:
            ctx.state.setdefault("spent", 0)

    template = AgentTemplate(model="echo", plugins=[TokenBudget()])
    old = {"plugins": {"token_budget": dict(MARKER)}, "messages": []}
    ref = AgentSession.start(
        template, restored_state=old, stripped_fields=("plugins.token_budget",)
    )
    try:
        state = ref.proxy().state().get(timeout=5)
    finally:
        ref.stop(block=True, timeout=5)
    assert state["plugins"] == {"token_budget": {"spent": 0}}


def test_strip_secrets_keeps_a_tenant_id_shaped_like_a_key() -> None:
    tenant = "sk-bratislava-office-01"
    metadata = {"tenant_id": tenant, "note": "sk-0123456789abcdefghij"}
    snapshot = Snapshot.new(session_id="s", state={"metadata": metadata, "plugins": {}})

    stripped = strip_secrets(snapshot)

    assert stripped.state["metadata"] == {"tenant_id": tenant, "note": MARKER}
    assert stripped.stripped_fields == ("metadata.note",)
    only_tenant = Snapshot.new(session_id="s", state={"metadata": {"tenant_id": tenant}})
    assert strip_secrets(only_tenant) is only_tenant
