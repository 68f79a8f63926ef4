"""Monitors: one Down per watcher, the right reason, and every Pykka lifecycle hole closed."""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

import pykka
import pytest

from supervisor import (
    NOPROC,
    NORMAL,
    SHUTDOWN,
    Down,
    Killed,
    SupervisedActor,
    demonitor,
    is_abnormal,
    kill,
    monitor,
    supervised_class,
    terminate,
)
from tests.supervisor.helpers import WAIT, Downs, Worker, crash


class Collector(SupervisedActor):
    """An actor watcher: keeps the Downs it is told."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[Down] = []
        self.arrived = threading.Event()

    def on_receive(self, message: Any) -> Any:
        if message == "got":
            return list(self.got)
        self.got.append(message)
        self.arrived.set()
        return None


class Plain(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


def test_normal_stop_gives_one_normal_down() -> None:
    ref = Worker.start()
    downs = Downs()
    mref = monitor(ref, downs)
    ref.stop()
    [down] = downs.wait()
    assert down == Down(mref, ref, NORMAL)
    assert not down.abnormal
    assert mref.actor_ref is ref


def test_terminate_gives_shutdown() -> None:
    ref = Worker.start()
    downs = Downs()
    monitor(ref, downs)
    assert terminate(ref, WAIT) is True
    assert [d.reason for d in downs.wait()] == [SHUTDOWN]
    assert terminate(ref, WAIT) is True  # already gone: still True


def test_terminate_rejects_plain_actor() -> None:
    ref = Plain.start()
    with pytest.raises(TypeError, match="SupervisedActor"):
        terminate(ref, WAIT)


def test_tell_failure_is_a_death_after_on_failure() -> None:
    events: list[str] = []
    ref = Worker.start(events=events)
    downs = Downs()

    def watcher(down: Down) -> None:
        events.append("down")
        downs(down)

    monitor(ref, watcher)
    boom = RuntimeError("boom")
    crash(ref, boom)
    [down] = downs.wait()
    assert down.reason is boom
    assert down.abnormal
    assert events == ["on_failure", "down"]
    assert not ref.is_alive()
    assert pykka.ActorRegistry.get_by_urn(ref.actor_urn) is None


def test_ask_failure_is_returned_and_is_not_a_death() -> None:
    ref = Worker.start()
    downs = Downs()
    monitor(ref, downs)
    with pytest.raises(ValueError, match="asked"):
        ref.ask(("raise", ValueError("asked")), timeout=WAIT)
    assert ref.ask("ping", timeout=WAIT) == "pong"
    assert downs.items == []
    ref.stop()
    assert [d.reason for d in downs.wait()] == [NORMAL]


def test_death_in_on_start_is_reported_and_fails_queued_asks() -> None:
    events: list[str] = []
    boom = RuntimeError("no start")
    ref = Worker.start(fail_on_start=boom, events=events)
    future = ref.ask("ping", block=False)
    downs = Downs()
    monitor(ref, downs)
    [down] = downs.wait()
    assert down.reason is boom or down.reason == NOPROC  # noproc if it was already gone
    with pytest.raises(pykka.ActorDeadError):
        future.get(timeout=WAIT)
    assert events == []  # as in Pykka: neither on_failure nor on_stop


def test_death_in_on_start_seen_by_a_watcher_added_in_init() -> None:
    boom = RuntimeError("no start")
    downs = Downs()

    class EarlyWatched(Worker):
        def __init__(self) -> None:
            super().__init__(fail_on_start=boom)
            monitor(self.actor_ref, downs)

    ref = EarlyWatched.start()
    [down] = downs.wait()
    assert down.reason is boom
    assert down.actor_ref is ref


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt], ids=lambda t: t.__name__)
def test_base_exception_in_handler_kills_only_that_actor(exc_type: type[BaseException]) -> None:
    events: list[str] = []
    victim = Worker.start(events=events)
    bystander = Worker.start()
    downs = Downs()
    monitor(victim, downs)
    exc = exc_type(3)
    crash(victim, exc)
    [down] = downs.wait()
    assert down.reason is exc
    assert events == ["on_failure"]
    assert bystander.ask("ping", timeout=WAIT) == "pong"
    assert pykka.ActorRegistry.get_all() == [bystander]


def test_system_exit_in_ask_fails_the_caller_instead_of_hanging() -> None:
    ref = Worker.start()
    bystander = Worker.start()
    downs = Downs()
    monitor(ref, downs)
    with pytest.raises(pykka.ActorDeadError) as info:
        ref.ask(("raise", SystemExit(2)), timeout=WAIT)
    assert isinstance(info.value.__cause__, SystemExit)
    assert isinstance(downs.wait()[0].reason, SystemExit)
    assert bystander.is_alive()


def test_system_exit_in_on_start_kills_only_that_actor() -> None:
    bystander = Worker.start()
    downs = Downs()

    class Exits(Worker):
        def __init__(self) -> None:
            super().__init__(fail_on_start=SystemExit(1))
            monitor(self.actor_ref, downs)

    Exits.start()
    assert isinstance(downs.wait()[0].reason, SystemExit)
    assert bystander.ask("ping", timeout=WAIT) == "pong"


def test_on_stop_raising_makes_the_exit_abnormal() -> None:
    boom = RuntimeError("on_stop")

    class BadStop(Worker):
        def on_stop(self) -> None:
            raise boom

    ref = BadStop.start()
    downs = Downs()
    monitor(ref, downs)
    ref.stop()
    assert downs.wait()[0].reason is boom


def test_stop_all_gives_each_watcher_one_normal_down() -> None:
    refs = [Worker.start(str(i)) for i in range(5)]
    downs = Downs()
    for ref in refs:
        monitor(ref, downs)
        monitor(ref, downs)
    pykka.ActorRegistry.stop_all(timeout=WAIT)
    got = downs.wait(10)
    assert len(got) == 10
    assert {d.reason for d in got} == {NORMAL}
    assert sorted(d.actor_ref.actor_urn for d in got) == sorted(
        r.actor_urn for r in refs for _ in range(2)
    )


def test_monitoring_a_dead_actor_gives_noproc_at_once() -> None:
    ref = Worker.start()
    ref.stop()
    assert terminate(ref, WAIT)  # waits until its notices are out
    downs = Downs()
    mref = monitor(ref, downs)
    assert downs.items == [Down(mref, ref, NOPROC)]  # synchronously
    assert downs.threads == [threading.current_thread().name]
    assert demonitor(mref) is False


def test_many_watchers_early_phase_first_then_in_order() -> None:
    ref = Worker.start()
    order: list[str] = []
    for name in ["a", "b", "c"]:
        monitor(ref, functools.partial(lambda n, _d: order.append(n), name))
    monitor(ref, lambda _d: order.append("early"), early=True)
    last = Downs()
    monitor(ref, last)
    ref.stop()
    last.wait()
    assert order == ["early", "a", "b", "c"]
    assert last.threads[0] != threading.current_thread().name  # ran on the actor's thread


def test_watcher_added_while_dying_gets_exactly_one_down() -> None:
    ref = Worker.start()
    entered, release = threading.Event(), threading.Event()

    def blocking(_down: Down) -> None:
        entered.set()
        release.wait(WAIT)

    monitor(ref, blocking, early=True)
    boom = RuntimeError("dying")
    crash(ref, boom)
    assert entered.wait(WAIT)  # the actor is now inside its death notices
    late, late_early = Downs(), Downs()
    monitor(ref, late)
    monitor(ref, late_early, early=True)
    release.set()
    assert [d.reason for d in late.wait()] == [boom]
    assert [d.reason for d in late_early.wait()] == [boom]
    assert terminate(ref, WAIT)
    assert len(late.items) == 1
    assert len(late_early.items) == 1


def test_watchers_racing_the_death_each_get_one_down() -> None:
    for _ in range(20):
        ref = Worker.start()
        watchers = [Downs() for _ in range(8)]
        barrier = threading.Barrier(len(watchers) + 1)

        def add(w: Downs, r: pykka.ActorRef[Any] = ref, b: threading.Barrier = barrier) -> None:
            b.wait(WAIT)
            monitor(r, w)

        threads = [threading.Thread(target=add, args=(w,)) for w in watchers]
        for t in threads:
            t.start()
        barrier.wait(WAIT)
        crash(ref)
        for t in threads:
            t.join(WAIT)
        assert terminate(ref, WAIT)
        for w in watchers:
            [down] = w.wait()
            assert isinstance(down.reason, RuntimeError) or down.reason == NOPROC


def test_demonitor_before_death_means_no_down() -> None:
    ref = Worker.start()
    cancelled, after = Downs(), Downs()
    mref = monitor(ref, cancelled)
    monitor(ref, after)
    assert demonitor(mref) is True
    assert demonitor(mref) is False
    ref.stop()
    after.wait()  # delivered after where `cancelled` would have been
    assert cancelled.items == []


def test_demonitor_after_down_returns_false() -> None:
    ref = Worker.start()
    downs = Downs()
    mref = monitor(ref, downs)
    ref.stop()
    downs.wait()
    assert demonitor(mref) is False


def test_actor_watcher_is_told_the_down() -> None:
    collector = Collector.start()
    ref = Worker.start()
    mref = monitor(ref, collector)
    crash(ref)
    assert terminate(ref, WAIT)  # returns once the Down has been told
    got: list[Down] = collector.ask("got", block=True, timeout=WAIT)
    assert [d.ref for d in got] == [mref]
    collector.stop()


def test_dead_actor_watcher_is_skipped_and_others_still_run() -> None:
    collector = Collector.start()
    collector.stop()
    ref = Worker.start()
    downs = Downs()
    monitor(ref, collector)
    monitor(ref, downs)
    ref.stop()
    assert len(downs.wait()) == 1


def test_raising_watcher_is_logged_and_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    ref = Worker.start()
    downs = Downs()

    def bad(_down: Down) -> None:
        raise RuntimeError("watcher bug")

    monitor(ref, bad)
    monitor(ref, downs)
    with caplog.at_level(logging.ERROR, logger="supervisor"):
        ref.stop()
        downs.wait()
    assert "watcher bug" in caplog.text


def test_plain_pykka_actor_is_refused_with_the_fix_in_the_message() -> None:
    ref = Plain.start()
    with pytest.raises(TypeError, match=r"SupervisedActor.*supervised_class\(Plain\)"):
        monitor(ref, Downs())
    with pytest.raises(TypeError, match="ActorRef"):
        monitor("not a ref", Downs())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        monitor(Worker.start(), "nope")  # type: ignore[arg-type]


def test_supervised_class_wraps_a_plain_actor() -> None:
    cls = supervised_class(Plain)
    assert supervised_class(Plain) is cls
    assert supervised_class(cls) is cls
    assert issubclass(cls, Plain)
    assert issubclass(cls, SupervisedActor)
    ref = cls.start()
    downs = Downs()
    monitor(ref, downs)
    assert ref.ask("hi", timeout=WAIT) == "hi"
    ref.stop()
    assert downs.wait()[0].reason == NORMAL
    with pytest.raises(TypeError, match="ThreadingActor"):
        supervised_class(int)  # type: ignore[type-var]


def test_skipping_supervised_init_is_caught_with_a_hint() -> None:
    class Forgetful(SupervisedActor):
        def __init__(self) -> None:
            pykka.ThreadingActor.__init__(self)

    with pytest.raises(TypeError, match=r"super\(\).__init__\(\)"):
        Forgetful.start()
    assert pykka.ActorRegistry.get_all() == []


@pytest.mark.parametrize(
    ("reason", "abnormal"),
    [
        (NORMAL, False),
        (SHUTDOWN, False),
        (NOPROC, True),
        (ValueError(), True),
        (SystemExit(), True),
    ],
)
def test_is_abnormal(reason: Any, abnormal: bool) -> None:
    assert is_abnormal(reason) is abnormal


# -- kill: an abnormal exit on purpose (OTP's exit(Pid, kill)) ------------------------


def test_kill_is_an_abnormal_exit_with_killed_reason() -> None:
    failures: list[BaseException | None] = []

    class Victim(SupervisedActor):
        def on_failure(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
            failures.append(exc)

    ref = Victim.start()
    downs = Downs()
    monitor(ref, downs)
    kill(ref, "operator request")
    [down] = downs.wait()
    assert isinstance(down.reason, Killed)
    assert down.reason.reason == "operator request"
    assert down.abnormal
    assert failures == [down.reason]
    kill(ref)  # already dead: a no-op


def test_kill_needs_a_supervised_actor() -> None:
    class Plain(pykka.ThreadingActor):
        pass

    ref = Plain.start()
    with pytest.raises(TypeError, match="SupervisedActor"):
        kill(ref)
    ref.stop()
