"""Real actors and recorders shared by the supervision tests (fakes, no mocks, no sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka

from supervisor import ChildSpec, Down, SupervisedActor

WAIT = 5.0


class Downs:
    """A watcher that records every Down it gets; wait on it with a bound."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.items: list[Down] = []
        self.threads: list[str] = []

    def __call__(self, down: Down) -> None:
        with self._cond:
            self.items.append(down)
            self.threads.append(threading.current_thread().name)
            self._cond.notify_all()

    def wait(self, count: int = 1, timeout: float = WAIT) -> list[Down]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.items) >= count, timeout), (
                f"waited for {count} Down notices, got {len(self.items)}"
            )
            return list(self.items)


class Starts:
    """Records every start of every child id, in order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.refs: dict[str, list[pykka.ActorRef[Any]]] = {}
        self.order: list[str] = []

    def record(self, name: str, ref: pykka.ActorRef[Any]) -> None:
        with self._cond:
            self.refs.setdefault(name, []).append(ref)
            self.order.append(name)
            self._cond.notify_all()

    def count(self, name: str) -> int:
        with self._cond:
            return len(self.refs.get(name, []))

    def wait(self, name: str, count: int, timeout: float = WAIT) -> pykka.ActorRef[Any]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.refs.get(name, [])) >= count, timeout), (
                f"{name!r} started {len(self.refs.get(name, []))} times, wanted {count}"
            )
            return self.refs[name][count - 1]

    def latest(self, name: str) -> pykka.ActorRef[Any]:
        with self._cond:
            return self.refs[name][-1]


class Worker(SupervisedActor):
    """Answers ``"ping"``; raises what it is sent as ``("raise", exc)``; can block on a gate."""

    def __init__(
        self,
        name: str = "w",
        *,
        starts: Starts | None = None,
        stops: list[str] | None = None,
        fail_on_start: BaseException | None = None,
        events: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.starts = starts
        self.stops = stops
        self.fail_on_start = fail_on_start
        self.events = events

    def on_start(self) -> None:
        if self.fail_on_start is not None:
            raise self.fail_on_start
        if self.starts is not None:
            self.starts.record(self.name, self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        match message:
            case "ping":
                return "pong"
            case ("raise", BaseException() as exc):
                raise exc
            case ("block", threading.Event() as gate):
                gate.wait(WAIT)
                return "unblocked"
        return super().on_receive(message)

    def on_failure(self, *exc_info: Any) -> None:
        if self.events is not None:
            self.events.append("on_failure")

    def on_stop(self) -> None:
        if self.stops is not None:
            self.stops.append(self.name)
        if self.events is not None:
            self.events.append("on_stop")


def worker_spec(
    name: str,
    starts: Starts,
    *,
    restart: Any = "permanent",
    shutdown: float = WAIT,
    stops: list[str] | None = None,
) -> ChildSpec:
    """A ChildSpec starting a ``Worker`` that records its starts (and stops)."""
    start: Callable[[], pykka.ActorRef[Any]] = lambda: Worker.start(  # noqa: E731
        name, starts=starts, stops=stops
    )
    return ChildSpec(name, start, restart=restart, shutdown=shutdown)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def crash(ref: pykka.ActorRef[Any], exc: BaseException | None = None) -> None:
    """Kill an actor through a failing ``tell`` (an abnormal exit)."""
    ref.tell(("raise", exc if exc is not None else RuntimeError("crash")))
