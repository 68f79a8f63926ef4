"""Credentials per tenant: the host's callback is asked at every start and resume, its
answer reaches the provider, and it is never persisted."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors import AgentTemplate, Credentials
from supervisor import CredentialsUnavailable
from tests.providers.flavours import FLAVOURS, AdapterFactory, Flavour
from tests.providers.wire import WireServer
from tests.supervisor.host_helpers import HostFactory, watch_events

ONE_ADAPTER = pytest.mark.parametrize("flavour", [FLAVOURS[0]], ids=[FLAVOURS[0].name])
"""The callback's route does not depend on the adapter: the Chat Completions one stands
for all (each adapter's own use of credentials is tested in tests/providers)."""

BOTH_MODES = pytest.mark.parametrize("mode", ["thread", "process"])


@ONE_ADAPTER
@BOTH_MODES
def test_each_tenant_gets_its_key_asked_for_at_every_incarnation(
    flavour: Flavour,
    server: WireServer,
    make_adapter: AdapterFactory,
    make_provider_host: HostFactory,
) -> None:
    keys = {"acme": "sk-acme-1", "globex": "sk-globex-1"}
    asked: list[str] = []

    def credentials(tenant_id: str) -> Credentials:
        asked.append(tenant_id)
        return Credentials(api_key=keys[tenant_id], headers={"X-Tenant": tenant_id})

    host = make_provider_host(credentials=credentials)
    template = AgentTemplate(model=make_adapter())
    acme = host.start_session(template, tenant_id="acme")
    globex = host.start_session(template, tenant_id="globex")
    host.send(acme, "a")
    host.send(globex, "b")
    keys["acme"] = "sk-acme-2"  # rotated: the next incarnation gets the new one
    waiter = watch_events(host, acme)
    host.kill(acme)
    assert waiter.wait_for("resumed")
    host.send(acme, "c")
    seen = [(flavour.key_of(r.headers), r.headers["x-tenant"]) for r in server.requests]
    assert seen == [("sk-acme-1", "acme"), ("sk-globex-1", "globex"), ("sk-acme-2", "acme")]
    assert asked == ["acme", "globex", "acme"]


@ONE_ADAPTER
@pytest.mark.parametrize("answer", [KeyError("acme"), 42])
def test_a_callback_that_fails_fails_the_start_only(
    flavour: Flavour,
    make_adapter: AdapterFactory,
    make_provider_host: HostFactory,
    answer: object,
) -> None:
    def credentials(tenant_id: str) -> str:
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]  # what a wrong callback returns

    host = make_provider_host(credentials=credentials)
    with pytest.raises(CredentialsUnavailable, match="no credentials for tenant 'acme'") as info:
        host.start_session(AgentTemplate(model=make_adapter()), tenant_id="acme")
    if isinstance(answer, Exception):
        assert info.value.__cause__ is answer
    assert host.list_sessions() == []


@ONE_ADAPTER
@BOTH_MODES
def test_credentials_are_never_written_to_the_store(
    flavour: Flavour,
    server: WireServer,
    make_adapter: AdapterFactory,
    make_provider_host: HostFactory,
    tmp_path: Path,
) -> None:
    secret, header = "sk-live-secret-0123456789abcdef", "gw-header-secret-42"
    data_dir = tmp_path / "data"
    host = make_provider_host(
        store=None,
        data_dir=data_dir,
        credentials=lambda _tenant: Credentials(api_key=secret, headers={"X-Gateway": header}),
    )
    sid = host.start_session(AgentTemplate(model=make_adapter(stream=True)), tenant_id="acme")
    for text in ("one", "two", "three"):
        host.send(sid, text)
    host.checkpoint(sid, "labelled")
    assert host.hibernate(sid)
    host.send(sid, "after reactivation")  # the callback is asked again
    assert flavour.key_of(server.requests[-1].headers) == secret

    def leaks() -> list[str]:
        return [
            path.name
            for path in sorted(data_dir.iterdir())
            if secret.encode() in path.read_bytes() or header.encode() in path.read_bytes()
        ]

    files = {path.name for path in data_dir.iterdir()}
    assert {"checkpoints.db", "checkpoints.db-wal"} <= files  # the WAL is searched too
    assert leaks() == []
    host.shutdown()
    assert leaks() == []
