"""Hunt 9: ``AgentHost.kill`` says whether it killed anything. A session with no serving
incarnation (restarting after a crash, hibernated) is left as it is, as OTP's
``exit(Pid, kill)`` of a pid that is gone: ``False`` tells the caller, where the kill
used to vanish without a word."""

from __future__ import annotations

from pathlib import Path

from tests.supervisor.host_helpers import (
    WAIT,
    Fifo,
    HostFactory,
    Journal,
    pairs,
    poll_until,
    template,
    watch_events,
)
from tests.supervisor.test_hunt8_restart_stop import HeldRestart


def test_a_kill_during_a_restart_kills_nothing_and_says_so(
    make_host: HostFactory, fifo: Fifo, tmp_path: Path
) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid = host.start_session(template(journal, plugins=[HeldRestart(str(fifo.path))]))
    host.send(sid, "hello")
    events = watch_events(host, sid)
    assert host.kill(sid, reason="test") is True
    events.wait_for("crashed")
    assert poll_until(lambda: len(journal.of(sid)) == 2)  # its restart is held

    assert host.kill(sid, reason="again") is False  # nothing serves: nothing to kill
    fifo.release()
    events.wait_for("resumed")

    assert events.count("crashed") == 1  # the second kill crashed nothing
    assert host.send(sid, "again").content == "echo: again"
    assert pairs(host.history(sid)) == [("hello", "echo: hello"), ("again", "echo: again")]
    assert events.count("crashed") == 1


def test_a_kill_of_a_hibernated_session_kills_nothing_and_says_so(
    make_host: HostFactory, tmp_path: Path
) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid = host.start_session(template(journal))
    host.send(sid, "hello")
    assert host.hibernate(sid)
    events = watch_events(host, sid)

    assert host.kill(sid) is False
    assert host.session_info(sid).status == "hibernated"
    assert host.send(sid, "again").content == "echo: again"
    assert "crashed" not in events.types()
    assert "reactivated" in events.types()
