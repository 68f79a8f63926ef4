"""Secrets never reach a checkpoint: the host's redaction policy strips them from every
snapshot it saves (in every mode, whichever path saves it), and a plugin rebuilds them
in ``session_start`` from its own configuration on resume (``ctx.stripped`` lists them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors import (
    AgentTemplate,
    Plugin,
    PluginContext,
    Snapshot,
    is_secret_value,
    strip_secrets,
)
from supervisor import AgentHost
from tests.supervisor.host_helpers import host_options

API_KEY = "sk-test-0123456789abcdefghij"
TOKEN = "Bearer tok-0123456789abcdefghij"


class Credentials(Plugin):
    """Keeps a provider key and an auth header in its state, from its configuration."""

    name = "credentials"

    def __init__(self, api_key: str, token: str) -> None:
        self.api_key = api_key
        self.token = token

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state["rebuilt"] = sorted(ctx.stripped)
        ctx.state["openai_api_key"] = self.api_key
        ctx.state["headers"] = {"Authorization": self.token, "Accept": "json"}
        ctx.state["upstream"] = [self.token]


def _files(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("checkpoints.db*")))


def test_checkpoints_hold_no_secret_and_plugins_rebuild_them(tmp_path: Path, mode: str) -> None:
    template = AgentTemplate(plugins=(Credentials(API_KEY, TOKEN),))
    with AgentHost(data_dir=tmp_path, **host_options(mode)) as host:
        sid = host.start_session(template, "s")
        host.send(sid, "hello")
        host.checkpoint(sid)
        host.hibernate(sid)
        saved = _files(tmp_path)
        assert b"hello" in saved  # the conversation is stored (encryption is another matter)
        assert API_KEY.encode() not in saved
        assert b"tok-0123456789" not in saved
    assert API_KEY.encode() not in _files(tmp_path)  # nor after the final checkpoints
    with AgentHost(data_dir=tmp_path, **host_options(mode)) as again:
        again.resume("s", template)
        state = again.checkpoint("s").state["plugins"]["credentials"]
        assert state["rebuilt"] == [
            "headers.Authorization",
            "openai_api_key",
            "upstream[0]",
        ]


def test_redact_none_saves_secrets_as_they_are(tmp_path: Path) -> None:
    template = AgentTemplate(plugins=(Credentials(API_KEY, TOKEN),))
    with AgentHost(data_dir=tmp_path, redact=None) as host:
        host.start_session(template, "s")
        host.send("s", "hello")
    assert API_KEY.encode() in _files(tmp_path)


def test_strip_secrets_replaces_keys_and_credential_values_and_lists_them() -> None:
    state = {
        "messages": [{"role": "user", "content": TOKEN}],  # the conversation is not scanned
        "plugins": {"p": {"client_secret": "cs-3", "n": [1, "sk-short"], "input_tokens": 2}},
        "provider_state": {"auth": TOKEN},
    }
    snapshot = Snapshot.new(session_id="s", state=state)

    stripped = strip_secrets(snapshot)

    marker = {"__stripped__": "secret"}
    assert stripped.state["plugins"] == {
        "p": {"client_secret": marker, "n": [1, "sk-short"], "input_tokens": 2}
    }
    assert stripped.state["provider_state"] == {"auth": marker}
    assert stripped.state["messages"] == state["messages"]
    assert stripped.stripped_fields == ("plugins.p.client_secret", "provider_state.auth")
    assert snapshot.state["provider_state"] == {"auth": TOKEN}  # the input is untouched
    assert strip_secrets(stripped) is stripped  # nothing left to strip
    clean = Snapshot.new(session_id="s", state={"plugins": {"p": {"x": 1}}})
    assert strip_secrets(clean) is clean


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        (TOKEN, True),
        ("bearer abcdefgh12", True),
        (API_KEY, True),
        ("sk-ant-api03-abcdefghijklmnop", True),
        ("Bearer x", False),
        ("sk-short", False),
        ("a sk-0123456789abcdefghij in text", False),
        (12, False),
    ],
)
def test_is_secret_value(value: object, secret: bool) -> None:
    assert is_secret_value(value) is secret
