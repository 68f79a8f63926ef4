"""The msgpack frames exchanged between the host and a worker process, and error transport.

One ``multiprocessing.Pipe`` per worker carries every frame, each one msgpack
map in ``Connection``'s own framing, written and read by ``_frames``. Many
calls may be in flight at once; replies are matched to requests by ``id``,
never by order.

Parent -> worker (requests)::

    {"id": int, "op": str, "payload": <op-specific>}

    op              payload                                             reply payload
    load_template   {"key": str, "template": bytes, "model": bytes,
                     "about": str}                                      None
    unload_template {"key": str}                                        None
    start           {"session": sid, "key": str,
                     "restore": {"state": dict, "stripped": [str],
                                 "checked": bool} | None,
                     "options": {max_steps, checkpoint_every (int|None),
                     max_steering_queue, metadata, steering: [str],
                     credentials: {api_key, headers} | None,
                     epoch: int}}                                       None
    send            {"session": sid, "text": str}                       {"message": dict,
                                                                         "checkpoint": bytes|None}
    snapshot        {"session": sid, "label": str|None}                 bytes (Snapshot.serialize)
    history         {"session": sid}                                    [Message.to_dict()]
    rollback        {"session": sid}                                    None
    steer           {"session": sid, "text": str}                       None
    stop            {"session": sid}                                    None
    shutdown        None                                                None (then the worker exits)

    {"op": "poke"}    the answer to the worker's ``poke`` (below); no reply

Worker -> parent::

    {"op": "ready"}                                       first frame: the worker serves
    {"id": int, "ok": true, "payload": ...}                 a reply
    {"id": int, "ok": false, "error": <an error map, below>}
    {"op": "event", "session": sid, "type": str, "data": dict}  a session event (unsolicited)
    {"op": "events", "session": sid, "events": [[type, data], ...], "call": int}
                                                          events held back in a call (and a
                                                          streamed delta, at once); ``call``:
                                                          the call running, if one is
    {"op": "down", "session": sid, "reason": str}         a session died in the worker
    {"op": "poke"}                                        write a ``poke`` back, at once

An idle session in a worker waits for its next call in a blocking read of the
pipe, which nothing in the worker can interrupt; when a message reaches its
inbox (a stop, a kill) or the worker stops, the worker writes ``poke`` and the
parent's answering ``poke`` ends that read.

A reply may also carry ``"session": sid, "events": [[type, data], ...]``: the
events its call published and held back, to publish before the reply. The
worker writes a call's events with its reply, or as one ``events`` frame
before a slow step (a model call or tool that took over ``SLOW_STEP``, 1 ms,
last time, or has not run yet), so a consumer still sees a slow step's events
while the step runs, and a quick turn costs one frame. Either way they are part of
the call's reply: a subscriber in the parent that ends the session on one of them fails
the call with ``SessionDown``, and its reply, if it comes after, is dropped.

``rollback`` undoes the session's last ``send`` when the parent could not
save the checkpoint that reply carried; the parent writes it before the
``send`` caller sees the error, and the session runs it on its own thread
before any later call (a no-op when another ``send`` ran since).

A call whose session ended while the call waited fails with error type
``SessionDown`` and ``args == [started]``: ``started`` is true for the call the
session was running when it died (a crash during the call), false for calls
still queued behind it (never run: safe to send again to the next incarnation).

An error map is plain data, never a pickle::

    {"type": qualname, "module": str, "message": str(exc), "args": [...],
     "attrs": {name: value}, "cause_attrs": [name], "cause": <error map>?,
     "traceback": str}

``encode_error`` writes it in the worker and ``decode_error`` rebuilds the
exception in the parent with its own class, looked up by ``module`` and
``type`` among the modules the parent has already imported, created without
running an ``__init__`` written in Python (``decode_error`` says what is kept
and what is not).
A worker cannot make the parent run code of its choosing: nothing is
unpickled and nothing is imported; the worst a frame can do is name a
different exception class, or carry wrong values.

``load_template`` carries cloudpickle bytes (the template's closures, and the
live model the parent resolved from a model string, or empty bytes when the
template holds a live model itself) and ``about``, the parent's description of
the template for the ``TemplateNotLoadable`` the worker raises when it cannot
load it; everything else is plain data. Events are pushed
before the reply of the call that produced them, so the parent has published
them when the call returns.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from types import ModuleType, WrapperDescriptorType
from typing import Any

import msgpack

from supervisor.errors import RemoteError

__all__ = [
    "POKE",
    "SESSION_DOWN",
    "RemoteTraceback",
    "SessionDown",
    "decode_error",
    "encode_error",
    "pack",
    "pack_escaped",
    "unpack",
]

POKE = "poke"
"""The op of the frame a worker writes to have the parent write one back (see above)."""

SESSION_DOWN = "SessionDown"
"""Error type of a reply to a call whose session died in the worker while it waited."""

_MAX_CAUSES = 8
"""How many links of an exception's ``__cause__`` chain an error map carries."""

_MAX_NESTING = 32
"""How deep lists and dicts may nest in a value that is carried as plain data."""

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
"""The integers msgpack can carry."""


class SessionDown(RemoteError):
    """The parent's form of a ``SessionDown`` reply; ``started``: the call had begun running.

    Immutable once built: safe to share between threads.
    """

    def __init__(self, remote_message: str, *, started: bool) -> None:
        super().__init__(SESSION_DOWN, remote_message)
        self.started = started


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, formatted there.

    ``decode_error`` makes it the ``__cause__`` of the exception it rebuilds (of
    the innermost one, when the remote exception had causes of its own), so a
    traceback printed in the parent shows where the error happened in the
    worker. ``str()`` of it, and ``text``, are that traceback. Immutable once
    built: safe to share between threads.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


_packers: list[msgpack.Packer] = []
"""Idle packers, reused: ``msgpack.packb`` builds a new ``Packer`` (and its buffer) per
call, a third of the cost of packing a small frame. A thread takes one with ``pop`` and
puts it back with ``append`` (both atomic), so no two threads, nor a ``repr`` that packs
again while its caller is packing, ever share one."""

_POOLED_FRAME_MAX = 1 << 20
"""A packer whose last frame was longer (bytes) is dropped, not kept: its buffer grew to that
length, and msgpack never shrinks it (a worker that once sent a 100 MB checkpoint held
100 MB for good)."""


def pack(frame: dict[str, Any]) -> bytes:
    """Encode a frame; values msgpack cannot carry are sent as their ``repr``. Thread-safe."""
    try:
        packer = _packers.pop()
    except IndexError:
        packer = msgpack.Packer(use_bin_type=True, default=repr)
    data: bytes = packer.pack(frame)
    if len(data) <= _POOLED_FRAME_MAX:  # not after a failure: that packer is simply dropped
        _packers.append(packer)
    return data


def pack_escaped(frame: dict[str, Any]) -> bytes:
    """Encode a frame that may be shown altered (events, errors, session downs): as ``pack``,
    or, when it holds text msgpack cannot carry (lone surrogates, such as an undecodable
    file name) or an integer out of its range, with that text backslash-escaped and those
    integers as decimal text."""
    try:
        return pack(frame)
    except (UnicodeEncodeError, OverflowError, ValueError, TypeError):
        return pack(_escaped(frame))


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    return value


def unpack(data: bytes) -> dict[str, Any]:
    """Decode a frame (raises ``ValueError`` for a frame that is not a map)."""
    frame = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(frame, dict):
        raise ValueError(f"a worker frame must be a map, got {type(frame).__name__}")
    return frame


class _NotPlain(Exception):
    """Raised by ``_plain`` for a value that is not plain data."""


def _plain(value: object, depth: int = 0) -> Any:
    """``value`` as plain msgpack data, or ``_NotPlain``.

    Plain: ``None``, ``bool``, ``int`` (in msgpack's range), ``float``, ``str``,
    ``bytes``, and lists, tuples and dicts of those (dict keys scalar). Tuples
    arrive as lists (msgpack has one array type). Subclasses of ``int``,
    ``float``, ``str`` and ``bytes`` (an ``IntEnum`` such as ``HTTPStatus``)
    arrive as the base type, so they still compare equal.
    """
    if value is None or isinstance(value, bool):  # bool cannot be subclassed
        return value
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise _NotPlain
        return int.__int__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(value)
    if depth >= _MAX_NESTING:
        raise _NotPlain
    if isinstance(value, list | tuple):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, dict):
        plain: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, list | tuple | dict):
                raise _NotPlain
            plain[_plain(key, depth + 1)] = _plain(item, depth + 1)
        return plain
    raise _NotPlain


def _arg(value: object) -> Any:
    """An element of ``args`` as plain data, or else its ``repr`` (keeps its position)."""
    try:
        return _plain(value)
    except _NotPlain:
        return _safely(repr, value)


def _safely(text: Any, value: object) -> str:
    """``text(value)`` (``str`` or ``repr``), or a placeholder when that raises."""
    try:
        return str(text(value))
    except Exception as exc:
        return f"<{text.__name__}() of {type(value).__qualname__} failed: {exc!r}>"


def _encode(exc: BaseException, causes: int) -> dict[str, Any]:
    cls = type(exc)
    cause = exc.__cause__
    attrs: dict[str, Any] = {}
    cause_attrs: list[str] = []
    for name, value in vars(exc).items():
        if not isinstance(name, str):
            continue
        if cause is not None and value is cause:  # PluginError.error: the cause itself
            cause_attrs.append(name)
            continue
        try:
            attrs[name] = _plain(value)
        except _NotPlain:
            attrs[name] = None  # a live object (an HTTP response): it stays in the worker
    error: dict[str, Any] = {
        "type": cls.__qualname__,
        "module": cls.__module__,
        "message": _safely(str, exc),
        "args": [_arg(arg) for arg in exc.args],
        "attrs": attrs,
        "cause_attrs": cause_attrs,
    }
    if cause is not None and causes > 0:
        error["cause"] = _encode(cause, causes - 1)
    return error


def encode_error(exc: BaseException) -> dict[str, Any]:
    """The error map of a failed reply: what ``decode_error`` needs to rebuild ``exc``.

    Plain data only, never a pickle. Carries the class's ``__module__`` and
    ``__qualname__``; ``str(exc)``; ``exc.args``, where an element that is not
    plain data (see ``_plain``) is replaced by its ``repr``, so positions are
    kept; the instance attributes (``vars(exc)``), where a value that is not
    plain data (an HTTP response, a client) is replaced by ``None``, so the
    attribute still exists on the rebuilt exception; the explicit ``__cause__``
    chain (``raise ... from``), up to ``_MAX_CAUSES`` links, where an attribute
    holding the cause itself (``PluginError.error``) is named in
    ``cause_attrs``; and the formatted traceback of the whole chain. Never
    raises: a ``str()`` or ``repr()`` that fails is replaced by a placeholder.
    """
    error = _encode(exc, _MAX_CAUSES)
    error["traceback"] = "".join(traceback.format_exception(exc))
    return error


class _Refused(Exception):
    """Why an error map cannot be rebuilt as its own class (the message says so)."""


def _exception_class(module_name: object, qualname: object) -> type[Exception]:
    """The class named by a worker, from a module this process has already imported.

    Nothing is imported: a name from the worker must not make this process run
    a module's top-level code. The module is looked up in ``sys.modules`` and
    the qualified name in the ``__dict__`` of the module and of each enclosing
    class, so no module ``__getattr__`` or descriptor runs either. Only
    ``Exception`` subclasses qualify: a worker catches nothing else, and a
    ``SystemExit`` or ``KeyboardInterrupt`` raised from a call would stop the
    caller's thread or program.
    """
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise _Refused("the error map names no class")
    full = f"{module_name}.{qualname}"
    module = sys.modules.get(module_name)
    if module is None:
        raise _Refused(
            f"module {module_name!r} is not imported in this process; import it in the "
            f"host to catch {full} itself"
        )
    found: object = module
    path = module_name
    for part in qualname.split("."):
        if not isinstance(found, ModuleType | type):
            raise _Refused(
                f"{full} cannot be looked up: {path} is a {type(found).__name__}, not a "
                "class; define the exception class at module level"
            )
        found = vars(found).get(part)
        path = f"{path}.{part}"
        if found is None:
            raise _Refused(f"{full} is not defined in this process")
    if not isinstance(found, type) or not issubclass(found, Exception):
        raise _Refused(f"{full} is not an Exception class")
    return found


def _instance(error: dict[str, Any]) -> Exception:
    """The remote exception as its own class, built without running Python ``__init__`` code.

    ``args`` go to ``__new__``: built-in exceptions such as ``OSError`` set
    their fields (``errno``, ``strerror``) there from the arguments. An
    ``__init__`` that is the interpreter's own (not written in Python) runs
    too, as it cannot run code and C exceptions such as ``UnicodeDecodeError``
    set their fields there; if it refuses the arguments the fields stay unset.
    A ``__new__`` written in Python (rare in exception classes) does run: it is
    code this process loaded itself, the worker only picks the class.
    """
    cls = _exception_class(error.get("module"), error.get("type"))
    args, attrs = error.get("args", []), error.get("attrs", {})
    if not isinstance(args, list) or not isinstance(attrs, dict):
        raise _Refused("the error map's args or attrs are malformed")
    full = f"{cls.__module__}.{cls.__qualname__}"
    try:
        exc = cls.__new__(cls, *args)
    except Exception as refused:
        raise _Refused(f"{full} cannot be created without its __init__: {refused!r}") from None
    if not isinstance(exc, Exception):
        raise _Refused(f"{full}.__new__ returned a {type(exc).__qualname__}, not an exception")
    init = cls.__init__
    if isinstance(init, WrapperDescriptorType):
        with contextlib.suppress(Exception):
            init(exc, *args)
    try:
        exc.args = tuple(args)
        vars(exc).update((name, value) for name, value in attrs.items() if isinstance(name, str))
    except Exception as refused:
        raise _Refused(f"{full} refused its args or attributes: {refused!r}") from None
    return exc


def _decode(error: dict[str, Any], remote: RemoteTraceback, causes: int) -> Exception:
    cause_map = error.get("cause")
    cause = None
    if isinstance(cause_map, dict) and causes > 0:
        cause = _decode(cause_map, remote, causes - 1)
    try:
        exc = _instance(error)
    except _Refused as refused:
        exc = RemoteError(
            str(error.get("type", "?")),
            str(error.get("message", "")),
            type_module=str(error.get("module", "")),
            remote_traceback=remote.text,
            reason=str(refused),
        )
    else:
        names = error.get("cause_attrs", [])
        if cause is not None and isinstance(names, list):
            vars(exc).update((name, cause) for name in names if isinstance(name, str))
    exc.__cause__ = remote if cause is None else cause
    return exc


def decode_error(error: dict[str, Any]) -> Exception:
    """The exception to raise in the parent for the error map of a failed reply.

    The worker's exception is rebuilt with its own class, so ``except
    openai.RateLimitError`` works as in thread mode. The class is looked up in
    the modules this process has already imported (see ``_exception_class``;
    the template was built here, so its modules usually are) and created
    without running an ``__init__`` written in Python (see ``_instance``: SDK
    errors take keyword-only arguments the worker does not send, and it would
    run code on values the worker chose), then given ``args`` and the plain
    attributes (live ones are ``None``). ``str()`` of the result is the
    original's whenever ``__str__`` depends only on ``args`` and plain
    attributes. Its ``__cause__`` is the rebuilt remote cause, if any, and at
    the end of that chain a ``RemoteTraceback`` with the worker's traceback
    text. ``PluginError.error`` is the rebuilt plugin error.

    When the class cannot be had (module not imported here, name not found, not
    an ``Exception`` subclass, ``__new__`` refusing) the result is a
    ``RemoteError`` carrying the type's name, the message, the traceback text
    and why. A ``SessionDown`` reply becomes ``SessionDown``. Nothing the worker
    sent is unpickled or imported, and this never raises: a malformed map
    yields a ``RemoteError`` too.
    """
    if not isinstance(error, dict):
        return RemoteError("?", repr(error), reason="the reply's error is not a map")
    kind, message = str(error.get("type", "?")), str(error.get("message", ""))
    if kind == SESSION_DOWN and "module" not in error:
        args = error.get("args") or [True]
        return SessionDown(message, started=bool(args[0]) if isinstance(args, list) else True)
    remote = RemoteTraceback(str(error.get("traceback", "")))
    try:
        return _decode(error, remote, _MAX_CAUSES)
    except Exception as malformed:  # a map no worker of ours writes
        return RemoteError(kind, message, remote_traceback=remote.text, reason=repr(malformed))
