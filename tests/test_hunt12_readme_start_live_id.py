"""``start_session`` of an id that is live here names the right cause and fix.

``AgentHost.start_session`` documents ``SessionAlreadyExists`` for an id that "is
live or hibernated here, or has checkpoints from an earlier life (``resume`` it, or
delete them)". For a live (or hibernated) session that has saved a checkpoint, the
store was asked first, so the error said "it has checkpoints from an earlier life:
resume() it", and following that advice fails again ("it is active on this host").
The live session is the cause, and ``resume`` names it so already.
"""

from __future__ import annotations

import pytest

from actors import AgentTemplate
from supervisor import AgentHost, MemoryCheckpointStore, SessionAlreadyExists

TEMPLATE = AgentTemplate(model="echo")


@pytest.mark.parametrize("hibernated", [False, True], ids=["active", "hibernated"])
def test_starting_an_id_that_runs_here_says_it_runs_here(hibernated: bool) -> None:
    with AgentHost(store=MemoryCheckpointStore()) as host:
        host.send(host.start_session(TEMPLATE, session_id="s1"), "hello")
        if hibernated:
            assert host.hibernate("s1")
        status = host.session_info("s1").status
        with pytest.raises(SessionAlreadyExists) as started:
            host.start_session(TEMPLATE, session_id="s1")
        with pytest.raises(SessionAlreadyExists) as resumed:
            host.resume("s1", TEMPLATE)
        assert f"it is {status} on this host" in str(resumed.value)
        assert str(started.value) == str(resumed.value)
