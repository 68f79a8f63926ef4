"""What a host tells its operator: log lines (never prints) that read as sentences.

An exit reason used to appear as its repr (``Killed('killed: killed')``); the
host's log lines and its ``crashed``/``given_up`` events now say it in words
(``describe_reason``), and the data directory is logged, not printed to
stderr, so logging settings decide whether it shows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import AgentTemplate
from supervisor import (
    NOPROC,
    NORMAL,
    SHUTDOWN,
    AgentHost,
    ChildStartError,
    ExitReason,
    Killed,
    MemoryCheckpointStore,
    WorkerCrashed,
)
from supervisor._lifecycle import describe_reason
from tests.supervisor.helpers import FakeClock
from tests.supervisor.host_helpers import MODES, Journal, host_options, template, watch_events


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Where the host runs its sessions (see ``host_helpers.MODES``)."""
    return str(request.param)


@pytest.fixture
def host(mode: str) -> Iterator[AgentHost]:
    with AgentHost(MemoryCheckpointStore(), **host_options(mode)) as started:
        yield started


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "supervisor.host" and r.levelno == level
    ]


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (NORMAL, "stopped normally"),
        (SHUTDOWN, "stopped by its supervisor"),
        (NOPROC, "noproc: it was gone before anyone watched it, so why is unknown"),
        (Killed(), "killed"),
        (Killed("chaos monkey"), "killed: chaos monkey"),
        (ValueError("bad input"), "ValueError: bad input"),
        (SystemExit(), "SystemExit"),
        (
            WorkerCrashed(42, "signal SIGKILL"),
            "WorkerCrashed: worker process pid 42 died (signal SIGKILL); retry once it is resumed",
        ),
        (
            ChildStartError("s", RuntimeError("no")),
            "ChildStartError: child 's' failed to start: RuntimeError('no')",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_an_exit_reason_in_words(reason: ExitReason, words: str) -> None:
    assert describe_reason(reason) == words


def test_a_crash_is_logged_and_published_in_words(
    host: AgentHost, caplog: pytest.LogCaptureFixture
) -> None:
    sid = host.start_session(template(), "s")
    host.send(sid, "hello")
    waiter = watch_events(host, sid)

    with caplog.at_level(logging.WARNING, logger="supervisor.host"):
        host.kill(sid, reason="chaos monkey")
        crashed = waiter.wait_for("crashed")
        waiter.wait_for("resumed")

    assert crashed.data["reason"] == "killed: chaos monkey"
    assert _messages(caplog, logging.WARNING) == [
        "session 's' crashed (killed: chaos monkey); resuming it from its last checkpoint"
    ]


def test_giving_up_is_logged_and_published_in_words(
    mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path)
    options = host_options(mode)
    with AgentHost(MemoryCheckpointStore(), clock=FakeClock(), max_restarts=1, **options) as host:
        sid = host.start_session(template(journal), "doomed")
        host.send(sid, "hello")  # checkpointed: a restart is a resume, which the journal fails
        waiter = watch_events(host, sid)
        journal.broken = True

        with caplog.at_level(logging.ERROR, logger="supervisor.host"):
            host.kill(sid)
            given_up = waiter.wait_for("given_up")

    reason = given_up.data["reason"]
    assert reason == (
        "PluginError: plugin 'journal' failed in session_start: "
        "RuntimeError('journal cannot be reopened')"
    )
    assert _messages(caplog, logging.ERROR) == [
        f"session 'doomed' given up after repeated crashes (last: {reason}); "
        "fix the cause and resume() it"
    ]


def test_the_data_directory_is_logged_not_printed(
    mode: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with caplog.at_level(logging.INFO, logger="supervisor.host"):
        AgentHost(data_dir=tmp_path / "data", **host_options(mode)).shutdown()

    assert _messages(caplog, logging.INFO) == [
        f"checkpoints in {(tmp_path / 'data' / 'checkpoints.db').resolve()}"
    ]
    assert capsys.readouterr().err == ""


def test_a_host_started_with_logging_silenced_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.WARNING, logger="supervisor.host"):
        with AgentHost(data_dir=tmp_path) as host:
            host.start_session(AgentTemplate(), "quiet")

    assert _messages(caplog, logging.INFO) == []
    assert capsys.readouterr().err == ""
