"""The 503 a gateway answers for a session another node owns tells the client to send
again (the gateway routes it), naming the owner's node but not its internal address, and
the client's own session id, never the internal ``<tenant>/<id>``; it said "send the
call to that node" with the node's cluster address."""

from __future__ import annotations

from gateway.problems import problem_for
from supervisor import SessionOwnedElsewhere


def test_owned_elsewhere_says_to_send_again_without_internal_addresses() -> None:
    error = SessionOwnedElsewhere("acme/chat-1", "node-b", "http://10.0.0.7:8082")

    problem = problem_for(error, "chat-1")

    assert problem.status == 503
    assert problem.slug == "owned-elsewhere"
    assert problem.detail == (
        "session 'chat-1' is served by another node ('node-b') right now; send again: "
        "this server routes the request there"
    )
    assert "10.0.0.7" not in problem.detail
    assert "acme/" not in problem.detail
