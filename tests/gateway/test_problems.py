"""Which answer a store's errors get: both are retryable 503s, and a store that waited
too long for a lock is not mistaken for a session that did not answer in time."""

from __future__ import annotations

import pytest

from actors import UnsendableRequest
from gateway.problems import Problem, problem_for
from supervisor import HostShutDown, NodeFenced, StoreBusy, StoreFull, StoreUnreachable


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            StoreBusy("db:5432/x", "a save", TimeoutError("lock timeout")),
            Problem(503, "unavailable", "Temporarily unavailable", "StoreBusy", retry_after=1),
        ),
        (
            StoreUnreachable("db:5432/x", "a save", OSError("refused")),
            Problem(
                503, "unavailable", "Temporarily unavailable", "StoreUnreachable", retry_after=1
            ),
        ),
        (
            StoreFull("'/data/checkpoints.db'", OSError("database or disk is full")),
            Problem(503, "store-full", "Checkpoint store full", "StoreFull", retry_after=1),
        ),
        (
            TimeoutError(),
            Problem(503, "timeout", "No answer in time", "the session did not answer in time", 1),
        ),
    ],
)
def test_store_errors_are_retryable_unavailability(error: Exception, expected: Problem) -> None:
    assert problem_for(error) == expected


def test_a_host_shutting_down_is_a_retryable_503_not_an_internal_error() -> None:
    assert problem_for(HostShutDown(), "s1") == Problem(
        503,
        "shutting-down",
        "Server shutting down",
        "this server is shutting down; send again once it is back (or to another node)",
        retry_after=1,
    )


def test_a_request_the_provider_cannot_be_sent_is_the_clients_to_fix_not_retryable() -> None:
    error = UnsendableRequest("the user's last turn holds no text: send some text")
    assert problem_for(error, "s1") == Problem(
        422, "invalid-input", "Invalid input", "the user's last turn holds no text: send some text"
    )


@pytest.mark.parametrize("final", [False, True])
def test_a_fenced_node_is_a_retryable_503_not_an_internal_error(final: bool) -> None:
    error = NodeFenced("a", "its lease was last renewed 31.00 s ago", final=final)
    assert problem_for(error, "s1") == Problem(
        503,
        "node-fenced",
        "Server not serving sessions",
        "this server lost its lease on the cluster's database and serves no session until "
        "it renews it; send again: another node takes the session over",
        retry_after=1,
    )
