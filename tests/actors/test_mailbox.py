"""The inbox and reply slot of the project's actors (``actors._mailbox``) keep Pykka's
contracts: what an ``ask`` returns or raises, timeouts, several readers, the future
combinators, and a session's and a supervised actor's asks going through them."""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import pykka
import pytest

from actors import AgentSession, AgentTemplate, EchoModel, Message, Send
from actors._mailbox import Reply
from supervisor._actor import SupervisedActor

WAIT = 10.0


def test_the_answer_reaches_a_reader_that_waits_and_one_that_comes_late() -> None:
    reply: Reply[str] = Reply()
    with ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(reply.get, timeout=WAIT) for _ in range(4)]
        reply.set("done")
        assert [w.result(WAIT) for w in waiting] == ["done"] * 4
    assert reply.get() == "done"
    assert reply.get(timeout=0) == "done"


def test_no_answer_in_time_raises_pykka_timeout_naming_the_wait() -> None:
    reply: Reply[str] = Reply()
    with pytest.raises(pykka.Timeout, match=r"^0\.01 seconds$"):
        reply.get(timeout=0.01)
    with pytest.raises(pykka.Timeout):
        reply.get(timeout=-1)  # a deadline already past: no wait, no ValueError
    reply.set("late")
    assert reply.get(timeout=0) == "late"


def test_an_error_is_raised_to_every_reader_with_its_traceback() -> None:
    def fails() -> None:
        raise KeyError("missing")

    reply: Reply[None] = Reply()
    try:
        fails()
    except KeyError:
        reply.set_exception()
    for _ in range(2):
        with pytest.raises(KeyError, match="missing") as caught:
            reply.get(timeout=WAIT)
        assert caught.traceback[-1].name == "fails"
    only_type: Reply[None] = Reply()
    only_type.set_exception((ValueError, None, None))
    with pytest.raises(ValueError):
        only_type.get(timeout=WAIT)


def test_a_second_outcome_is_refused_as_pykka_refuses_it() -> None:
    reply: Reply[int] = Reply()
    reply.set(1)
    with pytest.raises(queue.Full):
        reply.set(2)
    with pytest.raises(queue.Full):
        reply.set_exception((ValueError, ValueError("x"), None))
    with pytest.raises(queue.Full):
        reply.set_get_hook(lambda _timeout: 3)
    assert reply.get() == 1


def test_pykkas_combinators_and_await_work_on_it() -> None:
    first: Reply[int] = Reply()
    second: Reply[int] = Reply()
    doubled = first.map(lambda x: x * 2)
    joined = first.join(second)
    first.set(20)
    second.set(22)
    assert doubled.get(timeout=WAIT) == 40
    assert list(joined.get(timeout=WAIT)) == [20, 22]
    assert pykka.get_all([first, second], timeout=WAIT) == [20, 22]

    async def awaited() -> int:
        return await first

    assert asyncio.run(awaited()) == 20


class _Echo(SupervisedActor):
    def on_receive(self, message: object) -> object:
        if message == "fail":
            raise RuntimeError("asked to fail")
        return message


def test_a_session_and_a_supervised_actor_answer_asks_from_several_threads() -> None:
    session = AgentSession.start(AgentTemplate(model=EchoModel()))
    echo = _Echo.start()
    try:

        def ask_echo(i: int) -> object:
            return echo.ask(i, timeout=WAIT)

        def ask_session(i: int) -> str:
            answer = session.ask(Send(f"t{i}"), timeout=WAIT)
            assert isinstance(answer, Message)
            return answer.content or ""

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask_echo, range(200)))
            texts = list(pool.map(ask_session, range(50)))
        assert answers == list(range(200))
        assert sorted(texts) == sorted(f"echo: t{i}" for i in range(50))
        assert len(session.proxy().history().get(timeout=WAIT)) == 100
        with pytest.raises(RuntimeError, match="asked to fail"):
            echo.ask("fail", timeout=WAIT)
        assert echo.ask("still here", timeout=WAIT) == "still here"
    finally:
        session.stop(timeout=WAIT)
        echo.stop(timeout=WAIT)
    with pytest.raises(pykka.ActorDeadError):
        echo.ask("gone", timeout=WAIT)


def test_an_ask_left_in_the_inbox_when_the_actor_stops_fails_with_actor_dead() -> None:
    entered, release = threading.Event(), threading.Event()

    class Slow(SupervisedActor):
        def on_receive(self, message: object) -> object:
            entered.set()
            release.wait(WAIT)
            return message

    ref = Slow.start()
    busy = ref.ask("busy", block=False)
    assert entered.wait(WAIT)
    stopping = ref.stop(block=False)
    queued = ref.ask("queued", block=False)
    release.set()
    assert busy.get(timeout=WAIT) == "busy"
    assert stopping.get(timeout=WAIT) is True
    with pytest.raises(pykka.ActorDeadError):
        queued.get(timeout=WAIT)
