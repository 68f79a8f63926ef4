"""README, "Several hosts on PostgreSQL": session ids there are text PostgreSQL can
index, so one with a NUL character is refused with a ``ValueError`` naming it; and
"Arguments are checked at the call, before anything starts or is sent".

A host on a ``PostgresCheckpointStore`` took ``start_session(session_id="a\\x00b")``:
the session ran, and only its first save refused the id, so every ``send``,
``checkpoint`` and ``stop_session`` of it failed with that ``ValueError`` and it stayed
listed (only ``stop_session(checkpoint=False)`` ended it). The id should be refused at
the start, before the session runs, as the store will refuse it at every save.
"""

from __future__ import annotations

import pytest

from actors import AgentTemplate
from supervisor import AgentHost, PostgresCheckpointStore

TEMPLATE = AgentTemplate(model="echo")


def test_a_session_id_postgresql_cannot_store_is_refused_at_the_start(
    pg_dsn: str, pg_schema: str
) -> None:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema) as store, AgentHost(store=store) as host:
        try:
            with pytest.raises(ValueError, match="NUL"):
                host.start_session(TEMPLATE, session_id="a\x00b")
            assert host.list_sessions() == []
        finally:
            for info in host.list_sessions():  # what the bug left running
                host.stop_session(info.session_id, checkpoint=False)


def test_a_future_start_refuses_it_at_the_call(pg_dsn: str, pg_schema: str) -> None:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema) as store, AgentHost(store=store) as host:
        with pytest.raises(ValueError, match="NUL"):
            host.futures.start_session(TEMPLATE, session_id="a\x00b")
        assert host.list_sessions() == []
