"""The msgpack frames exchanged between the host and a worker process, and error transport.

One ``multiprocessing.Pipe`` per worker carries every frame, each one msgpack
map sent with ``send_bytes``. Many calls may be in flight at once; replies are
matched to requests by ``id``, never by order.

Parent -> worker (requests)::

    {"id": int, "op": str, "payload": <op-specific>}

    op              payload                                             reply payload
    load_template   {"key": str, "template": bytes, "model": bytes}     None
    start           {"session": sid, "key": str,
                     "restore": {"state": dict, "stripped": [str]} | None,
                     "options": {max_steps, checkpoint_every (int|None),
                     max_steering_queue, metadata, steering: [str]}}    None
    send            {"session": sid, "text": str}                       {"message": dict,
                                                                         "checkpoint": bytes|None}
    snapshot        {"session": sid, "label": str|None}                 bytes (Snapshot.serialize)
    history         {"session": sid}                                    [Message.to_dict()]
    steer           {"session": sid, "text": str}                       None
    stop            {"session": sid}                                    None
    shutdown        None                                                None (then the worker exits)

Worker -> parent::

    {"op": "ready"}                                       first frame: the worker serves
    {"id": int, "ok": true, "payload": ...}                 a reply
    {"id": int, "ok": false, "error": {"type", "message", "args"}}
    {"op": "event", "session": sid, "type": str, "data": dict}  a session event (unsolicited)
    {"op": "events", "session": sid, "events": [[type, data], ...]}  events held back in a call
    {"op": "down", "session": sid, "reason": str}         a session died in the worker

A reply may also carry ``"session": sid, "events": [[type, data], ...]``: the
events its call published and held back, to publish before the reply. The
worker writes a call's events with its reply, or as one ``events`` frame
before a slow step (a model call or tool that took over ``SLOW_STEP``, 1 ms,
last time, or has not run yet), so a consumer still sees a slow step's events
while the step runs, and a quick turn costs one frame.

A call whose session ended while the call waited fails with error type
``SessionDown`` and ``args == [started]``: ``started`` is true for the call the
session was running when it died (a crash during the call), false for calls
still queued behind it (never run: safe to send again to the next incarnation).

``load_template`` carries cloudpickle bytes (the template's closures, and the
live model the parent resolved from a model string, or empty bytes when the
template holds a live model itself); everything else is plain data. Events are pushed
before the reply of the call that produced them, so the parent has published
them when the call returns.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
import msgpack

from actors import PluginError, SteeringQueueFull, TurnLimitExceeded
from supervisor.errors import RemoteError

__all__ = ["SESSION_DOWN", "SessionDown", "decode_error", "encode_error", "pack", "unpack"]

SESSION_DOWN = "SessionDown"
"""Error type of a reply to a call whose session died in the worker while it waited."""


class SessionDown(RemoteError):
    """The parent's form of a ``SessionDown`` reply; ``started``: the call had begun running."""

    def __init__(self, remote_message: str, *, started: bool) -> None:
        super().__init__(SESSION_DOWN, remote_message)
        self.started = started


def pack(frame: dict[str, Any]) -> bytes:
    """Encode a frame; values msgpack cannot carry are sent as their ``repr``."""
    data: bytes = msgpack.packb(frame, use_bin_type=True, default=repr)
    return data


def unpack(data: bytes) -> dict[str, Any]:
    """Decode a frame (raises ``ValueError`` for a frame that is not a map)."""
    frame = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(frame, dict):
        raise ValueError(f"a worker frame must be a map, got {type(frame).__name__}")
    return frame


def encode_error(exc: BaseException) -> dict[str, Any]:
    """The error part of a failed reply: type name, message and what rebuilds it."""
    args: list[Any] = []
    if isinstance(exc, SteeringQueueFull):
        args = [exc.limit]
    elif isinstance(exc, TurnLimitExceeded):
        args = [getattr(exc, "max_steps", 0)]
    elif isinstance(exc, PluginError):
        args = [exc.plugin, exc.hook, type(exc.error).__name__, str(exc.error)]
    try:  # the exception itself, so the caller sees the same class as in thread mode
        pickled: bytes | None = cloudpickle.dumps(exc)
    except Exception:
        pickled = None
    return {"type": type(exc).__name__, "message": str(exc), "args": args, "pickled": pickled}


def _unpickled(data: object) -> Exception | None:
    """The worker's own exception object, when it pickled and unpickles cleanly.

    Only our own worker process writes these bytes. Exceptions whose
    ``__init__`` does not accept their ``args`` back fail to unpickle; they
    take the explicit paths below instead.
    """
    if not isinstance(data, bytes):
        return None
    try:
        exc = cloudpickle.loads(data)
    except Exception:
        return None
    return exc if isinstance(exc, Exception) else None


def decode_error(error: dict[str, Any]) -> Exception:
    """The exception to raise in the parent for a failed reply.

    The worker's exception itself when it survives a pickle round trip (a
    model's ``RuntimeError`` reaches the caller as in thread mode); otherwise
    ``PluginError``, ``SteeringQueueFull`` and ``TurnLimitExceeded`` are rebuilt
    (a plugin's own exception as a ``RemoteError`` cause), and anything else
    becomes a ``RemoteError`` naming the original type and message.
    """
    kind, message, args = error.get("type", "?"), error.get("message", ""), error.get("args", [])
    if kind == SESSION_DOWN:
        return SessionDown(str(message), started=bool(args[0]) if args else True)
    if kind == "SteeringQueueFull" and args:
        return SteeringQueueFull(int(args[0]))
    if kind == "TurnLimitExceeded" and args:
        return TurnLimitExceeded(int(args[0]))
    own = _unpickled(error.get("pickled"))
    if own is not None:
        return own
    if kind == "PluginError" and len(args) == 4:
        cause = RemoteError(str(args[2]), str(args[3]))
        exc = PluginError(str(args[0]), str(args[1]), cause)
        exc.__cause__ = cause
        return exc
    return RemoteError(str(kind), str(message))
