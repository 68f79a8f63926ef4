"""A session whose first start fails on a cluster node (a plugin's ``session_start``
raising) leaves its id free: the failed start had claimed the id, and the claim was kept
while the record was forgotten, so a start of that id on any other node raised
``SessionOwnedElsewhere`` (a gateway create answered 409) for as long as the node lived.
A resume that finds no checkpoint gives its claim up the same way."""

from __future__ import annotations

import pytest

from actors import AgentTemplate, Plugin, PluginContext, PluginError
from supervisor import CheckpointNotFound
from tests.supervisor.cluster_helpers import Cluster
from tests.supervisor.host_helpers import template


class _Refuses(Plugin):
    name = "refuses"

    def session_start(self, ctx: PluginContext) -> None:
        raise RuntimeError("no database for this session")


def test_a_failed_first_start_leaves_the_id_to_other_nodes(cluster: Cluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    broken = AgentTemplate(model="echo", plugins=[_Refuses()])

    with pytest.raises(PluginError, match="no database"):
        a.start_session(broken, "shared")

    assert b.start_session(template(), "shared") == "shared"
    assert b.send("shared", "hello").content == "echo: hello"


def test_a_resume_without_a_checkpoint_leaves_the_id_to_other_nodes(cluster: Cluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")

    with pytest.raises(CheckpointNotFound):
        a.resume("never-saved", template())

    assert b.start_session(template(), "never-saved") == "never-saved"
