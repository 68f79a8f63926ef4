"""Exceptions cross the worker pipe as plain data and come back with their own class.

A model's exception raised in a worker process reaches the caller as that
class (``except RateLimitError`` works as in thread mode), rebuilt without
running its ``__init__``, with its ``args``, its plain attributes and the
worker's traceback text as ``__cause__``. Nothing in an error map is
unpickled or imported: a worker that sends a pickle payload, or names a
function, a non-exception class or a module the host never imported, gets a
``RemoteError`` at most, and no code of its choosing runs in the host.
"""

from __future__ import annotations

import sys
import textwrap
import threading
import traceback
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from actors import AgentTemplate, PluginError, SteeringQueueFull, TurnLimitExceeded
from supervisor import AgentHost, MemoryCheckpointStore, RemoteError
from supervisor.workers._hosted_session import down_reply
from supervisor.workers._protocol import (
    RemoteTraceback,
    SessionDown,
    decode_error,
    encode_error,
    pack,
    unpack,
)
from tests.supervisor.host_helpers import MODES, host_options
from tests.supervisor.workers.worker_tools import (
    RATE_LIMIT_BODY,
    APIStatusError,
    FakeResponse,
    RateLimitedModel,
    RateLimitError,
)


def _raised(exc: BaseException) -> BaseException:
    """``exc`` after a ``raise``, so it has a traceback as in a worker."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def _across(exc: BaseException) -> Exception:
    """What the caller gets for ``exc`` raised in a worker: encoded, through msgpack, decoded."""
    frame = unpack(pack({"id": 1, "ok": False, "error": encode_error(_raised(exc))}))
    return decode_error(frame["error"])


def _error_map(module: str, qualname: str, **fields: Any) -> dict[str, Any]:
    """An error map as a worker writes it, but naming ``module.qualname``."""
    error = encode_error(_raised(ValueError("from the worker")))
    return {**error, "module": module, "type": qualname, **fields}


class QuotaExceeded(Exception):
    """A user's error with a keyword-only ``__init__`` that counts its calls."""

    inits = 0

    def __init__(self, tenant: str, *, limit: int, window: HTTPStatus | None = None) -> None:
        type(self).inits += 1
        super().__init__(f"tenant {tenant!r} is over its limit of {limit}")
        self.tenant = tenant
        self.limit = limit
        self.window = window
        self.retry_after = [1.5, 3.0]


class Outer:
    """Holds a nested exception class (its qualname is ``Outer.Failure``)."""

    class Failure(Exception):
        """Nested: resolved through ``Outer``'s own namespace."""


class WithLiveParts(Exception):
    """Holds a lock (not plain data) next to plain data, in args and attributes."""

    def __init__(self, lock: Any) -> None:
        super().__init__("locked out", lock)
        self.lock = lock
        self.code = 42


# -- round trips ---------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad value"),
        KeyError("missing"),
        RuntimeError(),
        ZeroDivisionError("division by zero"),
        FileNotFoundError(2, "No such file or directory"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        TimeoutError("provider timed out"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_builtin_errors_keep_their_class_args_and_message(exc: Exception) -> None:
    rebuilt = _across(exc)

    assert type(rebuilt) is type(exc)
    assert rebuilt.args == exc.args
    assert str(rebuilt) == str(exc)


def test_os_errors_keep_their_fields() -> None:
    rebuilt = _across(FileNotFoundError(2, "No such file or directory"))

    assert isinstance(rebuilt, FileNotFoundError)
    assert (rebuilt.errno, rebuilt.strerror) == (2, "No such file or directory")


def test_a_keyword_only_init_is_not_run_and_attributes_come_back() -> None:
    original = QuotaExceeded("acme", limit=10, window=HTTPStatus.TOO_MANY_REQUESTS)
    inits = QuotaExceeded.inits

    rebuilt = _across(original)

    assert QuotaExceeded.inits == inits  # rebuilt without its __init__
    assert type(rebuilt) is QuotaExceeded
    assert str(rebuilt) == "tenant 'acme' is over its limit of 10"
    assert (rebuilt.tenant, rebuilt.limit, rebuilt.retry_after) == ("acme", 10, [1.5, 3.0])
    assert rebuilt.window == 429  # an IntEnum arrives as its int


def test_an_sdk_shaped_error_comes_back_with_its_class_and_plain_attributes() -> None:
    original = RateLimitError(
        "Error code: 429 - Rate limit reached", response=FakeResponse(429), body=RATE_LIMIT_BODY
    )

    rebuilt = _across(original)

    assert type(rebuilt) is RateLimitError
    assert isinstance(rebuilt, APIStatusError)
    assert str(rebuilt) == str(original)
    assert rebuilt.message == original.message
    assert rebuilt.status_code == 429
    assert rebuilt.body == RATE_LIMIT_BODY
    assert rebuilt.response is None  # the live response stayed in the worker


def test_values_that_are_not_plain_data_are_replaced() -> None:
    lock = threading.Lock()

    rebuilt = _across(WithLiveParts(lock))

    assert type(rebuilt) is WithLiveParts
    assert rebuilt.args == ("locked out", repr(lock))  # an arg: its repr, in its place
    assert rebuilt.lock is None  # an attribute: None
    assert rebuilt.code == 42


def test_a_nested_class_is_found_by_its_qualname() -> None:
    rebuilt = _across(Outer.Failure("inner failure"))

    assert type(rebuilt) is Outer.Failure
    assert str(rebuilt) == "inner failure"


def test_the_supervisions_own_errors_keep_their_fields() -> None:
    full = _across(SteeringQueueFull(3))
    limit = _across(TurnLimitExceeded(7))

    assert type(full) is SteeringQueueFull
    assert full.limit == 3
    assert str(full) == str(SteeringQueueFull(3))
    assert type(limit) is TurnLimitExceeded
    assert limit.max_steps == 7
    assert str(limit) == str(TurnLimitExceeded(7))


def test_a_plugin_error_keeps_its_plugin_and_the_plugins_own_error() -> None:
    original = PluginError("vault", "session_start", QuotaExceeded("acme", limit=1))

    rebuilt = _across(original)

    assert type(rebuilt) is PluginError
    assert (rebuilt.plugin, rebuilt.hook) == ("vault", "session_start")
    assert str(rebuilt) == str(original)
    assert type(rebuilt.error) is QuotaExceeded
    assert rebuilt.error.limit == 1
    assert rebuilt.__cause__ is rebuilt.error


def test_a_session_down_reply_is_session_down() -> None:
    for started in (True, False):
        error = unpack(pack(down_reply(1, "it crashed", started=started)))["error"]

        down = decode_error(error)

        assert isinstance(down, SessionDown)
        assert down.started is started
        assert down.remote_message == "it crashed"


# -- the remote traceback ------------------------------------------------------


def _fails_in_the_worker() -> None:
    raise QuotaExceeded("acme", limit=5)


def test_the_remote_traceback_is_the_cause() -> None:
    try:
        _fails_in_the_worker()
    except QuotaExceeded as exc:
        error = encode_error(exc)

    rebuilt = decode_error(unpack(pack(error)))

    remote = rebuilt.__cause__
    assert isinstance(remote, RemoteTraceback)
    assert "in _fails_in_the_worker" in str(remote)
    assert 'raise QuotaExceeded("acme", limit=5)' in str(remote)
    assert str(remote).rstrip().endswith("over its limit of 5")
    printed = "".join(traceback.format_exception(rebuilt))
    assert "in _fails_in_the_worker" in printed


def test_a_cause_chain_comes_back_and_ends_in_the_remote_traceback() -> None:
    try:
        try:
            _fails_in_the_worker()
        except QuotaExceeded as quota:
            raise RuntimeError("turn failed") from quota
    except RuntimeError as exc:
        error = encode_error(exc)

    rebuilt = decode_error(unpack(pack(error)))

    assert type(rebuilt) is RuntimeError
    assert type(rebuilt.__cause__) is QuotaExceeded
    remote = rebuilt.__cause__.__cause__
    assert isinstance(remote, RemoteTraceback)
    assert "in _fails_in_the_worker" in remote.text
    assert "RuntimeError: turn failed" in remote.text


def test_a_cause_cycle_is_carried_a_bounded_number_of_links() -> None:
    first, second = ValueError("first"), KeyError("second")
    first.__cause__, second.__cause__ = second, first

    rebuilt = decode_error(unpack(pack(encode_error(first))))

    chain: list[BaseException] = []
    link: BaseException | None = rebuilt
    while link is not None:
        chain.append(link)
        link = link.__cause__
    assert [type(e) for e in chain[:4]] == [ValueError, KeyError, ValueError, KeyError]
    assert isinstance(chain[-1], RemoteTraceback)
    assert len(chain) < 20


def test_an_error_whose_str_raises_is_still_encoded() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    error = encode_error(_raised(Unprintable()))

    assert error["message"].startswith("<str() of ")
    assert isinstance(decode_error(unpack(pack(error))), RemoteError)  # a local class


# -- classes that cannot be rebuilt ---------------------------------------------


def test_a_local_class_becomes_a_remote_error_with_everything_known() -> None:
    class LocalFailure(Exception):
        pass

    rebuilt = _across(LocalFailure("local"))

    assert type(rebuilt) is RemoteError
    assert rebuilt.type_name.endswith("<locals>.LocalFailure")
    assert rebuilt.type_module == __name__
    assert rebuilt.remote_message == "local"
    assert "LocalFailure: local" in rebuilt.remote_traceback
    assert rebuilt.reason == (
        f"{__name__}.{rebuilt.type_name} cannot be looked up: {__name__}."
        "test_a_local_class_becomes_a_remote_error_with_everything_known is a function, "
        "not a class; define the exception class at module level"
    )
    assert str(rebuilt).startswith(f"{__name__}.{rebuilt.type_name}: local (raised in a worker")
    assert isinstance(rebuilt.__cause__, RemoteTraceback)
    assert rebuilt.__cause__.text == rebuilt.remote_traceback


def test_a_module_the_host_never_imported_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "worker_only_errors.py").write_text(
        textwrap.dedent(
            f"""
            open({str(marker)!r}, "w").close()  # top-level code: must never run in the host

            class ProviderDown(Exception):
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    rebuilt = decode_error(_error_map("worker_only_errors", "ProviderDown"))

    assert not marker.exists()
    assert "worker_only_errors" not in sys.modules
    assert isinstance(rebuilt, RemoteError)
    assert rebuilt.type_name == "ProviderDown"
    assert rebuilt.reason == (
        "module 'worker_only_errors' is not imported in this process; import it in the "
        "host to catch worker_only_errors.ProviderDown itself"
    )


# -- error maps a compromised worker could send ----------------------------------


class _WritesAFile:
    """A pickle payload: unpickling it opens (creates) ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def test_a_pickle_in_an_error_map_is_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    payload = cloudpickle.dumps(_WritesAFile(marker))
    error = encode_error(_raised(ValueError("plain")))

    for field in ("pickled", "args", "message", "traceback"):
        decode_error(unpack(pack({**error, field: payload})))
    rebuilt = decode_error(unpack(pack({**error, "pickled": payload})))

    assert not marker.exists()
    assert type(rebuilt) is ValueError
    assert str(rebuilt) == "plain"


@pytest.mark.parametrize(
    ("module", "qualname", "reason"),
    [
        ("os", "system", "os.system is not an Exception class"),
        ("builtins", "eval", "builtins.eval is not an Exception class"),
        ("builtins", "type", "builtins.type is not an Exception class"),
        ("subprocess", "Popen", "subprocess.Popen is not an Exception class"),
        ("builtins", "SystemExit", "builtins.SystemExit is not an Exception class"),
        ("builtins", "KeyboardInterrupt", "builtins.KeyboardInterrupt is not an Exception class"),
        ("os", "system.__self__", "os.system is a builtin_function_or_method, not a class"),
        ("builtins", "ValueError.__init__", "is not an Exception class"),
        ("os", "no_such_name", "os.no_such_name is not defined in this process"),
    ],
)
def test_a_frame_naming_something_else_runs_nothing(
    tmp_path: Path, module: str, qualname: str, reason: str
) -> None:
    marker = tmp_path / "ran"
    command = f"touch {marker}"
    error = _error_map(module, qualname, args=[command])

    rebuilt = decode_error(unpack(pack(error)))

    assert not marker.exists()
    assert type(rebuilt) is RemoteError
    assert reason in rebuilt.reason
    assert rebuilt.remote_message == "from the worker"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ({}, RemoteError),
        ({"type": 3, "module": None}, RemoteError),
        ({"type": "ValueError", "module": "builtins", "args": "not a list"}, RemoteError),
        ({"type": "ValueError", "module": "builtins", "attrs": ["a", "list"]}, RemoteError),
        ({"type": "ValueError", "module": "builtins", "cause": 1, "cause_attrs": 5}, ValueError),
        ({"type": "ValueError", "module": "builtins", "attrs": {"x": 1, 2: "y"}}, ValueError),
        ("not a map", RemoteError),
    ],
    ids=repr,
)
def test_a_malformed_error_map_never_raises(error: Any, expected: type[Exception]) -> None:
    assert type(decode_error(error)) is expected


# -- end to end ------------------------------------------------------------------


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def host(mode: str) -> Iterator[AgentHost]:
    with AgentHost(MemoryCheckpointStore(), **host_options(mode)) as built:
        yield built


def test_send_raises_the_models_own_sdk_error(host: AgentHost, mode: str) -> None:
    sid = host.start_session(AgentTemplate(model=RateLimitedModel()))

    with pytest.raises(RateLimitError) as caught:
        host.send(sid, "!429")

    error = caught.value
    assert type(error) is RateLimitError
    assert str(error) == "Error code: 429 - Rate limit reached"
    assert error.message == "Error code: 429 - Rate limit reached"
    assert error.status_code == 429
    assert error.body == RATE_LIMIT_BODY
    if mode != "thread":
        assert error.response is None
        remote = error.__cause__
        assert isinstance(remote, RemoteTraceback)
        assert "in generate" in remote.text
        assert "worker_tools.py" in remote.text
    # Not a crash: the session answers the next turn.
    assert host.send(sid, "hello").content == "echo: hello"
