"""Snapshot.new strips every kind of live value; redaction; checkpoint ids."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import io
import os
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pykka
import pytest

from actors import (
    STRIPPED_KEY,
    LiveResource,
    Snapshot,
    Usage,
    is_secret_key,
    is_stripped_marker,
    redact_secrets,
    strip_secrets,
)
from actors._ids import CheckpointIdGenerator
from actors.redact import SECRET_MARKER
from tests.actors.snapshot_helpers import session_state


class _Echo(pykka.ThreadingActor):
    def ping(self) -> str:
        return "pong"


def _closure() -> Callable[[], int]:
    captured = 3
    return lambda: captured


async def _coro() -> None:
    return None


async def _agen() -> Any:
    yield 1


def _gen() -> Iterator[int]:
    yield 1


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as resources:
        yield resources


def _actor_ref(stack: ExitStack) -> object:
    ref = _Echo.start()
    stack.callback(ref.stop)
    return ref


def _actor_future(stack: ExitStack) -> object:
    ref = _Echo.start()
    stack.callback(ref.stop)
    future = ref.proxy().ping()
    assert future.get(timeout=5) == "pong"
    return future


def _closing(stack: ExitStack, value: Any) -> Any:
    stack.callback(value.close)
    return value


def _async_values(kind: str) -> Callable[[ExitStack], object]:
    def make(stack: ExitStack) -> object:
        loop = asyncio.new_event_loop()
        stack.callback(loop.close)
        if kind == "loop":
            return loop
        if kind == "future":
            return loop.create_future()
        task = loop.create_task(_coro())
        stack.callback(loop.run_until_complete, task)
        return task

    return make


LIVE_FACTORIES: dict[str, Callable[[ExitStack], object]] = {
    "pykka-ref": _actor_ref,
    "pykka-proxy": lambda s: _actor_ref(s).proxy(),  # type: ignore[attr-defined]
    "pykka-future": _actor_future,
    "thread": lambda s: threading.Thread(target=print),
    "lock": lambda s: threading.Lock(),
    "rlock": lambda s: threading.RLock(),
    "condition": lambda s: threading.Condition(),
    "event": lambda s: threading.Event(),
    "semaphore": lambda s: threading.BoundedSemaphore(2),
    "barrier": lambda s: threading.Barrier(1),
    "concurrent-future": lambda s: concurrent.futures.Future(),
    "asyncio-future": _async_values("future"),
    "asyncio-task": _async_values("task"),
    "asyncio-loop": _async_values("loop"),
    "asyncio-lock": lambda s: asyncio.Lock(),
    "asyncio-event": lambda s: asyncio.Event(),
    "socket": lambda s: _closing(s, socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
    "bytes-io": lambda s: io.BytesIO(b"x"),
    "sqlite": lambda s: _closing(s, sqlite3.connect(":memory:")),
    "generator": lambda s: _gen(),
    "coroutine": lambda s: _closing(s, _coro()),
    "async-generator": lambda s: _agen(),
    "function": lambda s: print,
    "lambda": lambda s: lambda: 1,
    "closure": lambda s: _closure(),
    "bound-method": lambda s: "text".upper,
    "python-bound-method": lambda s: Usage().__add__,
    "builtin-method": lambda s: [].append,
    "partial": lambda s: functools.partial(int, base=2),
}


@pytest.mark.parametrize("kind", sorted(LIVE_FACTORIES))
def test_every_live_type_is_stripped_with_marker_and_path(kind: str, stack: ExitStack) -> None:
    live = LIVE_FACTORIES[kind](stack)
    state = session_state(1)
    state["plugins"]["db"] = {"conn": live, "pool": [1, live], "keep": "me"}
    snap = Snapshot.new(session_id="s", state=state)
    assert snap.stripped_fields == ("plugins.db.conn", "plugins.db.pool[1]")
    marker = snap.state["plugins"]["db"]["conn"]
    assert is_stripped_marker(marker)
    assert marker[STRIPPED_KEY] == f"{type(live).__module__}.{type(live).__qualname__}"
    assert snap.state["plugins"]["db"]["pool"] == [1, marker]
    assert snap.state["plugins"]["db"]["keep"] == "me"
    assert Snapshot.deserialize(snap.serialize()) == snap


def test_open_file_is_stripped(tmp_path: Path) -> None:
    with open(tmp_path / "f.txt", "w", encoding="utf-8") as handle:
        snap = Snapshot.new(session_id="s", state={"plugins": {"log": {"file": handle}}})
    assert snap.stripped_fields == ("plugins.log.file",)
    assert snap.state["plugins"]["log"]["file"] == {STRIPPED_KEY: "_io.TextIOWrapper"}


class _Client(LiveResource):
    """A class of one's own holding a connection: declared live by subclassing."""


class _Foreign:
    """A class that is not ours: declared live by registering it."""


LiveResource.register(_Foreign)


def test_live_resources_of_ones_own_are_stripped() -> None:
    state = {"plugins": {"p": {"client": _Client(), "foreign": _Foreign(), "plain": [1]}}}
    snap = Snapshot.new(session_id="s", state=state)
    assert snap.stripped_fields == ("plugins.p.client", "plugins.p.foreign")
    assert snap.state["plugins"]["p"]["client"] == {
        STRIPPED_KEY: f"{__name__}._Client",
    }
    assert snap.state["plugins"]["p"]["plain"] == [1]
    assert Snapshot.deserialize(snap.serialize()) == snap


@dataclass
class _PluginState:
    name: str
    lock: Any = field(default_factory=threading.Lock)
    items: tuple[int, ...] = (1, 2)


def test_dataclasses_become_dicts_and_are_walked() -> None:
    snap = Snapshot.new(session_id="s", state={"plugins": {"p": _PluginState("x")}})
    assert snap.state["plugins"]["p"] == {
        "name": "x",
        "lock": {STRIPPED_KEY: "_thread.lock"},
        "items": [1, 2],
    }
    assert snap.stripped_fields == ("plugins.p.lock",)


def test_dataclass_state_is_accepted() -> None:
    snap = Snapshot.new(session_id="s", state=_PluginState("root"))
    assert snap.state["name"] == "root"
    assert snap.stripped_fields == ("lock",)


def test_markers_already_in_state_are_listed_again() -> None:
    first = Snapshot.new(session_id="s", state={"plugins": {"db": {"conn": threading.Lock()}}})
    second = Snapshot.new(session_id="s", state=Snapshot.deserialize(first.serialize()).state)
    assert second.stripped_fields == ("plugins.db.conn",)
    assert second.state == first.state


def test_metadata_is_not_stripped_so_serialize_reports_it() -> None:
    snap = Snapshot.new(session_id="s", state={}, metadata={"cb": print})
    assert snap.stripped_fields == ()
    assert snap.metadata["cb"] is print


# --- redaction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "API_KEY",
        "apiKey",
        "APIKey",
        "X-Api-Key",
        "token",
        "access_token",
        "refresh_token",
        "authToken",
        "token_id",
        "password",
        "db_password",
        "passwd",
        "secret",
        "client_secret",
        "Authorization",
        "private_key",
        "privateKey",
        "ssh_passphrase",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    ["input_tokens", "output_tokens", "max_tokens", "tokens", "tokenizer", "author", "keyboard"],
)
def test_not_secret_keys(key: str) -> None:
    assert not is_secret_key(key)


def test_redact_secrets_drops_nested_secrets_and_keeps_usage() -> None:
    state = session_state(2)
    state["provider_state"] = {"api_key": "sk-1", "cursor": 2, "session": {"AccessToken": "t"}}
    state["plugins"]["http"] = {"headers": [{"Authorization": "Bearer x", "Accept": "json"}]}
    state["plugins"]["db"] = {"password": "p", "host": "h", "pair": ("a", {"secret": "s"})}
    snap = Snapshot.new(session_id="s", state=state, label="L", metadata={"api_key": "kept"})
    red = snap.redact(redact_secrets)
    assert red.state["provider_state"] == {"cursor": 2, "session": {}}
    assert red.state["plugins"]["http"] == {"headers": [{"Accept": "json"}]}
    assert red.state["plugins"]["db"] == {"host": "h", "pair": ["a", {}]}
    assert red.usage() == snap.usage()
    assert red.state["usage"]["input_tokens"] > 0
    assert red.messages() == snap.messages()
    # every other field unchanged, original untouched
    for name in ("schema_version", "checkpoint_id", "session_id", "saved_at", "label"):
        assert getattr(red, name) == getattr(snap, name)
    assert red.metadata == snap.metadata
    assert red.stripped_fields == snap.stripped_fields
    assert snap.state["provider_state"]["api_key"] == "sk-1"


def test_redact_gives_fn_a_private_copy() -> None:
    snap = Snapshot.new(session_id="s", state={"a": {"b": 1}})

    def mutate(state: dict[str, Any]) -> dict[str, Any]:
        state["a"]["b"] = 2
        return state

    assert snap.redact(mutate).state == {"a": {"b": 2}}
    assert snap.state == {"a": {"b": 1}}
    with pytest.raises(TypeError, match="must return a mapping"):
        snap.redact(lambda state: [1])  # type: ignore[arg-type, return-value]


# --- checkpoint ids -------------------------------------------------------------------------


def test_ids_stay_monotonic_when_the_clock_stands_still_or_steps_back() -> None:
    readings = iter([5_000_000, 5_000_000, 5_000_000, 4_000_000, 9_000_000])
    seqs = iter([100, 7])
    gen = CheckpointIdGenerator(clock_ns=lambda: next(readings), randbits=lambda _: next(seqs))
    ids = [gen.new()[0] for _ in range(5)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    assert ids[0] == f"{5:012x}{100:020x}"
    assert ids[3] == f"{5:012x}{103:020x}"  # clock stepped back: still after ids[2]
    assert ids[4] == f"{9:012x}{7:020x}"


def test_an_id_made_after_another_process_s_id_sorts_after_it() -> None:
    """Another process's id from the same millisecond (a higher sequence) is a floor."""
    readings = iter([5_000_000, 5_000_000, 6_000_000])
    gen = CheckpointIdGenerator(clock_ns=lambda: next(readings), randbits=lambda _: 10)
    elsewhere = f"{5:012x}{500:020x}"
    made = gen.new(after=elsewhere)[0]
    assert made == f"{5:012x}{501:020x}"
    assert gen.new()[0] == f"{5:012x}{502:020x}"  # and the count goes on from there
    assert gen.new(after="not-an-id")[0] == f"{6:012x}{10:020x}"  # ignored: the clock moved


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_draws_other_random_starts_than_its_parent() -> None:
    """The default source is seeded once per process: a forked child, which inherits its
    parent's generator state, is reseeded, so the two do not make the same ids."""
    from actors._ids import _SEEDED_BITS  # noqa: PLC0415 (the private default source)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next draw and leave at once
        os.write(write, _SEEDED_BITS(79).to_bytes(10, "big"))
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = int.from_bytes(os.read(read, 10), "big")
    os.close(read)
    assert status == 0
    assert child != _SEEDED_BITS(79)


def test_ids_are_unique_across_threads() -> None:
    gen = CheckpointIdGenerator()
    results: list[list[str]] = [[] for _ in range(4)]

    def work(out: list[str]) -> None:
        out.extend(gen.new()[0] for _ in range(2000))

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    ids = [i for out in results for i in out]
    assert len(set(ids)) == 8000
    assert all(out == sorted(out) for out in results)


def test_redact_secrets_keeps_plugins_named_like_secrets() -> None:
    state = session_state(1)
    state["plugins"]["token_budget"] = {"used": 120, "api_key": "sk-1"}
    state["plugins"]["password_policy"] = {"min_length": 12}
    red = Snapshot.new(session_id="s", state=state).redact(redact_secrets)
    assert red.state["plugins"]["token_budget"] == {"used": 120}
    assert red.state["plugins"]["password_policy"] == {"min_length": 12}
    assert state["plugins"]["token_budget"]["api_key"] == "sk-1"  # the input is untouched


COUNTS = {
    "token_count": 1234,
    "token_limit": 8000,
    "password_min_length": 12,
    "secret_rotated": True,
    "token_expires_at": None,
    "api_key_ratio": 0.5,
}


def test_numbers_under_secret_looking_keys_are_kept_by_both_redactors() -> None:
    """A count or a setting named after a secret is not one: a plugin gets it back."""
    state = session_state(1)
    state["plugins"]["budget"] = {**COUNTS, "token": "t-123", "api_key": b"k", "auth": ["x"]}
    snap = Snapshot.new(session_id="s", state=state)

    stripped = strip_secrets(snap)
    assert stripped.state["plugins"]["budget"] == {
        **COUNTS,
        "token": SECRET_MARKER,
        "api_key": SECRET_MARKER,
        "auth": ["x"],
    }
    assert sorted(stripped.stripped_fields) == ["plugins.budget.api_key", "plugins.budget.token"]
    assert snap.redact(redact_secrets).state["plugins"]["budget"] == {**COUNTS, "auth": ["x"]}


def test_containers_under_secret_looking_keys_go_whole() -> None:
    state = session_state(1)
    state["plugins"]["oauth"] = {"token": {"value": "v", "expires_in": 3600}, "scopes": ["a"]}
    stripped = strip_secrets(Snapshot.new(session_id="s", state=state))
    assert stripped.state["plugins"]["oauth"] == {"token": SECRET_MARKER, "scopes": ["a"]}
