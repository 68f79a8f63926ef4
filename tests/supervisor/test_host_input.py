"""Input a checkpoint could not hold never enters a session: text with a lone surrogate is
refused before the turn starts, a ``str`` subclass becomes a plain ``str``, and a session
id that is not a ``str`` is refused before the store is asked about it."""

from __future__ import annotations

import pytest

from actors import Snapshot, SnapshotDecodeError
from supervisor import MemoryCheckpointStore
from tests.supervisor.host_helpers import HostFactory, pairs, template


class Shouting(str):
    """A ``str`` subclass with its own behaviour (what a caller might pass by accident)."""

    def upper(self) -> str:
        return "overridden"


def test_text_with_a_lone_surrogate_is_refused_before_the_turn(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), "s")
    host.send(sid, "fine")

    with pytest.raises(ValueError, match=r"lone surrogate at index 7 \('\\udcff'\)"):
        host.send(sid, "report-\udcff.txt")
    with pytest.raises(ValueError, match="the steering text holds a lone surrogate"):
        host.steer(sid, "\ud800")

    assert [e.type for e in host.events(sid).events].count("turn_started") == 1
    assert pairs(host.checkpoint(sid).messages()) == [("fine", "echo: fine")]
    assert host.send(sid, "still fine").content == "echo: still fine"


def test_a_str_subclass_becomes_plain_text(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), Shouting("shouty"))

    answer = host.send(sid, Shouting("hello"))

    assert answer.content == "echo: hello"
    assert [type(s.session_id) for s in host.list_sessions()] == [str]
    assert [type(m.content) for m in host.history(sid)] == [str, str]
    assert host.checkpoint(sid).messages()[0].content == "hello"


def test_a_session_id_that_is_not_text_is_refused_first(make_host: HostFactory) -> None:
    host = make_host()
    with pytest.raises(TypeError, match="session_id must be a str, got tuple"):
        host.start_session(template(), ("a", "b"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session_id must be a str, got int"):
        host.resume(7, template())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "state",
    [
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": "not a list of messages"},
        {"usage": "lots"},
        {"turns": "many"},
    ],
    ids=["bad-role", "messages-not-a-list", "usage-not-a-map", "turns-not-a-number"],
)
def test_a_checkpoint_with_the_wrong_shapes_is_a_decode_error(
    make_host: HostFactory, state: dict[str, object]
) -> None:
    store = MemoryCheckpointStore()
    store.save(Snapshot.new(session_id="s", state={"session_id": "s", **state}))
    host = make_host(store=store)

    with pytest.raises(SnapshotDecodeError, match="the checkpoint of session 's' is not a valid"):
        host.resume("s", template())

    assert host.list_sessions() == []
    store.save(Snapshot.new(session_id="s", state={"session_id": "s"}))
    host.resume("s", template())  # the next good checkpoint resumes
    assert host.send("s", "hi").content == "echo: hi"
