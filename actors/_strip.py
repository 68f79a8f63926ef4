"""Stripping of live values from session state before it becomes a snapshot.

A live value is one whose meaning depends on this process being alive: actor
refs and proxies, threads, futures and tasks, locks and events, sockets, open
files, database connections, generators and coroutines, callables
(functions, lambdas, closures, bound methods, builtins, partials), and any
instance of ``LiveResource`` (a class of one's own, such as a client holding
a connection, subclasses or registers with it to be stripped too). Each is
replaced by a *marker*, the plain dict ``{"__stripped__": "<module>.<type>"}``
(for example ``{"__stripped__": "_thread.lock"}``), and the path where it sat is
recorded, e.g. ``plugins.db.conn`` or ``plugins.pool.workers[2]``. A dict key
adds ``.key``; a list index or a non-string key adds ``[index]``.

Markers are plain, so they survive serialization; a marker already present in
the state (a value stripped earlier that no plugin rebuilt) is listed again, so
the next resume still knows it must be rebuilt.

While walking, mappings become ``dict``, tuples become ``list`` and dataclass
instances become a ``dict`` of their fields, so the result compares equal to
what a serialize/deserialize round trip returns. Anything else that is not
plain (a set, an arbitrary object) is left in place for strict serialization to
refuse with its path. Pure functions: thread-safe as long as nobody mutates the
input while it is being walked.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import dataclasses
import functools
import io
import mmap
import selectors
import socket
import sqlite3
import subprocess
import threading
import types
import weakref
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pykka

from actors._codec import INT_MAX, INT_MIN, join_path

__all__ = [
    "LIVE_TYPES",
    "PLAIN_SCALARS",
    "STRIPPED_KEY",
    "LiveResource",
    "first_live",
    "is_flat_plain",
    "is_stripped_marker",
    "strip_live",
]

STRIPPED_KEY = "__stripped__"
"""The single key of a marker dict; its value names the type that was stripped."""


class LiveResource(abc.ABC):  # noqa: B024 (no abstract method: a marker to subclass or register)
    """Marks a type whose instances mean something only in this process, like a connection.

    Snapshots strip instances of such a type from plugin state as they strip
    sockets or open files: the value becomes a stripped marker and its path is
    listed in ``ctx.stripped`` on resume, where ``session_start`` rebuilds it.
    Subclass it, or ``LiveResource.register(SomeClient)`` for a class that is
    not yours. A marker only: it adds no behaviour, so thread-safety is the
    subclass's.
    """

    __slots__ = ()


LIVE_TYPES: tuple[type, ...] = (
    # actors and concurrency
    pykka.ActorRef,
    pykka.ActorProxy,
    pykka.CallableProxy,
    pykka.Future,
    threading.Thread,
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Condition,
    threading.Event,
    threading.Semaphore,
    threading.Barrier,
    concurrent.futures.Future,
    concurrent.futures.Executor,
    asyncio.Future,  # includes asyncio.Task
    asyncio.Handle,
    asyncio.AbstractEventLoop,
    asyncio.Lock,
    asyncio.Event,
    asyncio.Condition,
    asyncio.Semaphore,
    asyncio.Barrier,
    # operating-system resources
    socket.socket,
    io.IOBase,
    mmap.mmap,
    selectors.BaseSelector,
    subprocess.Popen,
    sqlite3.Connection,
    sqlite3.Cursor,
    weakref.ReferenceType,
    weakref.ProxyType,
    weakref.CallableProxyType,
    # suspended and callable code
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    functools.partial,
    # declared live by their authors
    LiveResource,
)
"""Types whose instances ``strip_live`` replaces with a marker."""

PLAIN_SCALARS = frozenset((type(None), bool, int, float, str, bytes, datetime))
"""The exact types a walk copies as they are (a snapshot's scalar parts need no walk)."""
_PLAIN_SCALARS = PLAIN_SCALARS


def is_stripped_marker(value: object) -> bool:
    """Whether ``value`` is a marker left where a live value was stripped."""
    return type(value) is dict and len(value) == 1 and isinstance(value.get(STRIPPED_KEY), str)


def is_flat_plain(value: object) -> bool:
    """Whether ``value`` is a ``dict`` of ASCII ``str`` keys to scalars a checkpoint holds
    as they are: ``None``, ``bool``, ``float``, a 64-bit ``int`` or an ASCII ``str``.

    Such a dict has nothing to strip, and encodes as it is. It is what most session
    metadata and plugin states hold, so a check of them can skip the walk, which costs
    more than ten times this look at a handful of keys. ``False`` says only that the full
    walk is needed (non-ASCII text may hold a lone surrogate; the marker's key is the
    walk's to judge).
    """
    if type(value) is not dict or STRIPPED_KEY in value:
        return False
    for key, item in list(value.items()):  # one step: another thread may change it
        if type(key) is not str or not key.isascii():
            return False
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return False
        elif kind is int:
            if not INT_MIN <= item <= INT_MAX:
                return False
        elif kind is not bool and kind is not float and item is not None:
            return False
    return True


def _marker(value: object) -> dict[str, str]:
    kind = type(value)
    return {STRIPPED_KEY: f"{kind.__module__}.{kind.__qualname__}"}


class _Walker:
    """One walk over a value; collects the stripped paths.

    Exact ``dict``/``list``/scalar types are tested first: they are nearly
    everything a session state holds, and ``isinstance`` against the live
    types or the ``Mapping`` ABC costs far more than a type identity check.
    """

    def __init__(self, strip: bool) -> None:
        self.strip = strip
        self.paths: list[str] = []
        self._active: set[int] = set()

    def walk(self, value: Any, path: str) -> Any:
        kind = type(value)
        if kind is dict:
            if self.strip and is_stripped_marker(value):
                self.paths.append(path)
                return dict(value)
            return self._mapping(value, path)
        if kind is list or kind is tuple:
            return self._sequence(value, path)
        if kind in _PLAIN_SCALARS:
            return value
        if self.strip and isinstance(value, LIVE_TYPES):
            self.paths.append(path)
            return _marker(value)
        if isinstance(value, Mapping):
            return self.walk(dict(value), path)
        if isinstance(value, list | tuple):
            return self._sequence(value, path)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return self._mapping(fields, path)
        return value  # not plain: strict serialization refuses it, naming the path

    def _enter(self, value: Any, path: str) -> None:
        if id(value) in self._active:
            raise ValueError(f"state contains a reference cycle at {path or '<root>'}")
        self._active.add(id(value))

    def _mapping(self, value: dict[Any, Any], path: str) -> dict[Any, Any]:
        self._enter(value, path)
        out: dict[Any, Any] = {}
        walk = self.walk
        for key, child in value.items():
            kind = type(child)
            if kind in _PLAIN_SCALARS:
                out[key] = child
            else:
                out[key] = walk(child, join_path(path, key))
        self._active.discard(id(value))
        return out

    def _sequence(self, value: list[Any] | tuple[Any, ...], path: str) -> list[Any]:
        self._enter(value, path)
        out: list[Any] = []
        walk = self.walk
        for index, child in enumerate(value):
            kind = type(child)
            if kind in _PLAIN_SCALARS:
                out.append(child)
            else:
                out.append(walk(child, join_path(path, index)))
        self._active.discard(id(value))
        return out


def first_live(value: object, root: str = "") -> tuple[str, object] | None:
    """The path (below ``root``) and the value of the first live value in ``value``, walked
    as ``strip_live`` walks it, or ``None``; a marker is plain data, not a live value.

    For state that must hold no live value, since nothing rebuilds it on resume (a model's
    provider state). Raises ``RecursionError`` for a cycle, as a copy of it would.
    """
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return None
    if kind is not dict and kind is not list and isinstance(value, LIVE_TYPES):
        return root, value
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    else:
        return None  # not plain: strict serialization refuses it, naming the path
    for key, child in items:
        found = first_live(child, join_path(root, key))
        if found is not None:
            return found
    return None


def strip_live(value: object, *, strip: bool = True, root: str = "") -> tuple[Any, tuple[str, ...]]:
    """Copy ``value`` with live values replaced by markers.

    Args:
        value: Any nesting of mappings, lists, tuples, dataclasses and scalars.
        strip: ``False`` only normalizes containers (used for snapshot metadata,
            where a live value is an error for serialization to report, not
            something to rebuild).
        root: The path of ``value`` itself, prefixed to every path found
            (``messages[3]``: what a walk of the whole state would record).

    Returns:
        The normalized copy and the paths of the stripped values, in walk order.

    Raises:
        ValueError: the value contains a reference cycle.
    """
    walker = _Walker(strip)
    return walker.walk(value, root), tuple(walker.paths)


LiveResource.__module__ = "actors"
