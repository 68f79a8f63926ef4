"""Validation of the metadata a session is registered with (the seed's ``session_metadata``),
and of what a send carries (its text and tag)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypedDict

from actors import Send
from actors._storable import user_text

__all__ = [
    "ALLOWED_ATTRS",
    "DEFAULT_EVENT_BUFFER_SIZE",
    "PluginSpec",
    "SessionAttrs",
    "SessionMetadata",
    "check_tenant_id",
    "plain_text",
    "send_request",
    "validate",
]

DEFAULT_EVENT_BUFFER_SIZE: Final = 1000
"""Default ``event_buffer_size``, the same as ``actors.AgentSession``'s."""

PluginSpec = str | tuple[str, Mapping[str, Any]]
"""A plugin as registered: its name, or ``(name, options)``."""


class SessionMetadata(TypedDict, total=False):
    """The descriptive registry attributes (all optional); ``SessionAttrs`` adds the
    identity ones. ``AgentHost`` takes these as keywords next to its own
    ``tenant_id`` and ``api_key`` parameters.
    """

    blueprint: str | None
    model: str | None
    working_dir: str | os.PathLike[str] | None
    group_id: str | None
    event_buffer_size: int
    hibernate_after_ms: int | None
    max_steering_queue: int | None
    plugins: Sequence[PluginSpec]


class SessionAttrs(SessionMetadata, total=False):
    """The keyword attributes ``SessionStore.create`` accepts (all optional).

    A type for checkers only; the store validates and copies the values, so a
    caller may reuse or mutate its dict afterwards.
    """

    api_key: str | None
    tenant_id: str


ALLOWED_ATTRS: Final = SessionAttrs.__required_keys__ | SessionAttrs.__optional_keys__


def _text(name: str, value: object, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        rule = "a non-empty str or None" if optional else "a non-empty str"
        msg = f"session attribute {name} must be {rule} (not only whitespace), got {value!r}"
        raise (ValueError if isinstance(value, str) else TypeError)(msg)
    # A lone surrogate is refused here, not at the first checkpoint (which cannot hold it).
    return user_text(value, f"session attribute {name}")


def check_tenant_id(value: object) -> str:
    """``value`` if sessions can be started under it as their ``tenant_id``.

    For programs that take a tenant before any session exists (an API key's,
    say), so that they refuse exactly what ``AgentHost.start_session`` would.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: it is empty or only whitespace, or holds a lone surrogate.
    """
    tenant = _text("tenant_id", value, optional=False)
    assert tenant is not None
    return tenant


def _int(name: str, value: object, *, minimum: int, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int or None" if optional else "an int"
        msg = f"session attribute {name} must be {kind}, got {value!r}"
        raise TypeError(msg)
    if value < minimum:
        msg = f"session attribute {name} must be >= {minimum}, got {value}"
        raise ValueError(msg)
    return value


def _plugins(value: object) -> tuple[PluginSpec, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        msg = f"session attribute plugins must be a list of names or (name, options), got {value!r}"
        raise TypeError(msg)
    out: list[PluginSpec] = []
    for item in value:
        if isinstance(item, str) and item:
            out.append(item)
            continue
        if (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[0]
            and isinstance(item[1], Mapping)
        ):
            out.append((item[0], MappingProxyType(dict(item[1]))))
            continue
        msg = (
            f"each plugin must be a non-empty name or a (name, options-mapping) tuple, got {item!r}"
        )
        raise TypeError(msg)
    return tuple(out)


def validate(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Check names and values of ``attrs``; return them normalised, defaults filled in.

    Raises:
        TypeError: an unknown attribute name, or a value of the wrong type.
        ValueError: a value of the right type that breaks its rule (empty, < 1).
    """
    unknown = sorted(set(attrs) - ALLOWED_ATTRS)
    if unknown:
        msg = (
            f"unknown session attribute(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(sorted(ALLOWED_ATTRS))}"
        )
        raise TypeError(msg)
    working_dir = attrs.get("working_dir")
    if isinstance(working_dir, os.PathLike):
        working_dir = os.fspath(working_dir)
    return {
        "api_key": _text("api_key", attrs.get("api_key"), optional=True),
        "tenant_id": _text("tenant_id", attrs.get("tenant_id", "default"), optional=False),
        "blueprint": _text("blueprint", attrs.get("blueprint"), optional=True),
        "model": _text("model", attrs.get("model"), optional=True),
        "working_dir": _text("working_dir", working_dir, optional=True),
        "group_id": _text("group_id", attrs.get("group_id"), optional=True),
        "event_buffer_size": _int(
            "event_buffer_size",
            attrs.get("event_buffer_size", DEFAULT_EVENT_BUFFER_SIZE),
            minimum=0,
            optional=False,
        ),
        "hibernate_after_ms": _int(
            "hibernate_after_ms", attrs.get("hibernate_after_ms"), minimum=1, optional=True
        ),
        "max_steering_queue": _int(
            "max_steering_queue", attrs.get("max_steering_queue"), minimum=1, optional=True
        ),
        "plugins": _plugins(attrs.get("plugins", ())),
    }


SessionAttrs.__module__ = "supervisor"
SessionMetadata.__module__ = "supervisor"


def plain_text(name: str, value: object) -> str:
    """``value`` as a plain ``str`` that a checkpoint can always hold.

    A ``str`` subclass becomes a plain copy (its methods could differ, and it
    cannot be encoded). Text with a lone surrogate (what ``os.listdir`` gives for
    bytes that are not UTF-8) is refused before anything runs.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: it holds a lone surrogate; the message says where and what to do.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return user_text(value, name)


MAX_TAG_CHARS = 256
"""The longest ``tag`` a send takes: a label, not a payload (every follower gets it)."""


def send_request(text: object, tag: object) -> Send:
    """The ``Send`` message of a host's send of ``text``, labelled ``tag`` (or not).

    Raises:
        TypeError: ``text``, or a ``tag`` given, is not a ``str``.
        ValueError: either holds a lone surrogate, or ``tag`` is empty or longer than
            ``MAX_TAG_CHARS``.
    """
    if not isinstance(text, str):
        raise TypeError(f"send() takes the user's text as a str, got {type(text).__name__}")
    if tag is None:
        return Send(plain_text("the user's text", text))
    label = plain_text("tag", tag)
    if not 0 < len(label) <= MAX_TAG_CHARS:
        raise ValueError(
            f"tag must be 1 to {MAX_TAG_CHARS} characters, got {len(label)}; use a short "
            "label such as a request id"
        )
    return Send(plain_text("the user's text", text), label)
