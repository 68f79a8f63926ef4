"""A ready redactor for ``Snapshot.redact``: drop keys that look like secrets.

The rule works on the *words* of a key: it is split at ``_``, ``-``, ``.``,
spaces and camelCase humps, then lower-cased (``X-Api-Key`` -> ``x api key``,
``accessToken`` -> ``access token``). A key is a secret when

* a word is ``token``, ``password``, ``passwd``, ``passphrase``, ``secret``,
  ``secrets``, ``authorization`` or ``apikey``, or
* two neighbouring words are ``api`` and ``key`` (or ``keys``), or ``private`` and
  ``key`` (or ``keys``).

An acronym ends a word where the next one begins (``HTTPToken`` -> ``http token``).
So ``token``, ``access_token``, ``refresh_token``, ``token_id``, ``authToken``,
``IDToken``, ``api_key``, ``api_keys``, ``APIKey``, ``private_key``,
``client_secret``, ``Authorization`` are dropped, while ``input_tokens``,
``output_tokens``, ``max_tokens`` (the plural ``tokens`` is a count, not a
credential), ``tokenizer``, ``keyboard`` and ``author`` are kept. The word rule
is deliberately narrower than "contains token": usage counts must survive
redaction.

Only a value that can hold a secret goes with its key: text, bytes, or a
container (a dict or list, whole). A number, a boolean, ``None`` or a datetime
under such a key stays: ``token_count``, ``token_limit`` or
``password_min_length`` hold counts and settings a plugin needs back on resume,
never a credential.

``strip_secrets`` is the policy an ``AgentHost`` applies to every checkpoint by
default. It looks where live configuration sits (plugin states, provider state,
session metadata; not the conversation, nor the plugins' names, which key their
states, nor the session's ``tenant_id``: none of them is a secret) and replaces
each secret, a value under a secret-looking key or a string that looks like a
credential (``Bearer ...``, ``sk-...``), by the stripped marker
``{"__stripped__": "secret"}``, listing its path with the snapshot's other
stripped fields: on resume, ``session_start`` finds it in ``ctx.stripped`` and
rebuilds it, as it rebuilds a live value.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from actors._codec import join_path
from actors._strip import STRIPPED_KEY
from actors.snapshot import parts_state

if TYPE_CHECKING:
    from actors.snapshot import Snapshot

__all__ = [
    "SECRET_MARKER",
    "SECRET_PARTS",
    "is_secret_key",
    "is_secret_value",
    "redact_secrets",
    "strip_secrets",
]

SECRET_MARKER = {STRIPPED_KEY: "secret"}
"""What ``strip_secrets`` puts where a secret was (a stripped marker: plain, and listed)."""

SECRET_PARTS = ("plugins", "provider_state", "metadata")
"""The parts of a session's state ``strip_secrets`` scans: where configuration lives."""

TENANT_KEY = "tenant_id"
"""The key of a session's metadata that holds its tenant, which ``strip_secrets`` keeps."""

_SECRET_VALUE = re.compile(r"^\s*(?:bearer\s+\S{8,}|sk-[A-Za-z0-9_-]{16,})\s*$", re.IGNORECASE)

_SECRET_WORDS = frozenset(
    ("token", "password", "passwd", "passphrase", "secret", "secrets", "authorization", "apikey")
)
_SECRET_PAIRS = frozenset(
    (("api", "key"), ("api", "keys"), ("private", "key"), ("private", "keys"))
)
# A hump: lower (or digit) then upper, or the last capital of an acronym before a word
# (``HTTPToken`` -> ``HTTP Token``, which read as the one word ``httptoken`` before).
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[^a-z0-9]+")


def is_secret_key(key: str) -> bool:
    """Whether a dict key names a secret under the module's word rule. Pure, thread-safe."""
    return _secret_key(key) if type(key) is str else _words_name_secret(key)


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    """``is_secret_key`` remembered: every checkpoint asks it again for the same few keys,
    and the word split is two regular expressions."""
    return _words_name_secret(key)


def _words_name_secret(key: str) -> bool:
    words = [w for w in _SEPARATORS.split(_HUMP.sub("_", key).lower()) if w]
    if _SECRET_WORDS.intersection(words):
        return True
    return not _SECRET_PAIRS.isdisjoint(pairwise(words))


def _may_be_secret(value: object) -> bool:
    """Whether ``value`` can hold a secret: text, bytes or a container. A number, a boolean,
    ``None`` or a datetime cannot (``token_count``: 1234 is a count, not a credential)."""
    return isinstance(value, str | bytes | bytearray | dict | list | tuple)


def is_secret_value(value: object) -> bool:
    """Whether ``value`` is a string that looks like a credential: an HTTP bearer token
    (``Bearer <token>``) or an API key of the ``sk-...`` form. Pure, thread-safe."""
    return isinstance(value, str) and _SECRET_VALUE.match(value) is not None


def strip_secrets(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with every secret in ``SECRET_PARTS`` of its state replaced by
    ``SECRET_MARKER`` and its path added to ``stripped_fields`` (the snapshot itself when
    there is none). Copies only what it changes. Pure, thread-safe.
    """
    found: list[str] = []
    state = parts_state(snapshot)  # it reads no messages: their list is not made for it
    changed = {}
    for part in SECRET_PARTS:
        held = state.get(part)
        if held:  # (None, an empty dict: no secret in it)
            value = _PART_STRIPS.get(part, _strip)(held, part, found)
            if value is not held:
                changed[part] = value
    if not found:
        return snapshot
    fields = tuple(dict.fromkeys((*snapshot.stripped_fields, *found)))
    return dataclasses.replace(
        snapshot, state={**snapshot.state, **changed}, stripped_fields=fields
    )


def _strip_plugins(states: Any, path: str, found: list[str]) -> Any:
    """``_strip`` of each plugin's state: the keys of ``plugins`` are plugin names, which
    name no secret (a plugin called ``token_budget`` is not a token), so they are not
    judged; judged by them, a plugin's whole state would be dropped from every checkpoint
    and its ``session_start`` would find a marker, not its state, on resume."""
    if not isinstance(states, dict):
        return _strip(states, path, found)
    copy: dict[Any, Any] | None = None
    for name, state in states.items():
        new = _strip(state, join_path(path, name), found)
        if new is not state:
            copy = dict(states) if copy is None else copy
            copy[name] = new
    return states if copy is None else copy


def _strip_metadata(metadata: Any, path: str, found: list[str]) -> Any:
    """``_strip`` of the session's metadata, but for its ``tenant_id``: the tenant a host
    resumes the session under, an identifier and never a credential. Were one shaped
    like a key (``sk-bratislava-office-01``) stripped, the session would come back under
    the ``default`` tenant: readable by that tenant, lost to its own."""
    if not isinstance(metadata, dict) or TENANT_KEY not in metadata:
        return _strip(metadata, path, found)
    rest = {key: value for key, value in metadata.items() if key != TENANT_KEY}
    stripped = _strip(rest, path, found)
    if stripped is rest:
        return metadata
    return {key: metadata[key] if key == TENANT_KEY else stripped[key] for key in metadata}


_PART_STRIPS = {"plugins": _strip_plugins, "metadata": _strip_metadata}
"""How each of ``SECRET_PARTS`` is stripped where it differs from ``_strip``."""


def _strip(value: Any, path: str, found: list[str]) -> Any:
    """``value`` with its secrets replaced (the same object when it has none)."""
    if isinstance(value, dict):
        copy: dict[Any, Any] | None = None
        for key, item in value.items():
            here = join_path(path, key)
            if (
                isinstance(key, str)
                and is_secret_key(key)
                and _may_be_secret(item)
                and item != SECRET_MARKER
            ):
                new: Any = dict(SECRET_MARKER)
                found.append(here)
            else:
                new = _strip(item, here, found)
            if new is not item:
                copy = dict(value) if copy is None else copy
                copy[key] = new
        return value if copy is None else copy
    if isinstance(value, list):
        items = [_strip(item, join_path(path, i), found) for i, item in enumerate(value)]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if is_secret_value(value):
        found.append(path)
        return dict(SECRET_MARKER)
    return value


def _redact(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: _redact(v)
            for k, v in value.items()
            if not (isinstance(k, str) and is_secret_key(k) and _may_be_secret(v))
        }
    if isinstance(value, list | tuple):
        return [_redact(v) for v in value]
    return value


def redact_secrets(state: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of ``state`` without the keys that look like secrets, at any depth.

    Use as ``snapshot.redact(redact_secrets)``. Walks dicts, lists and tuples
    (tuples become lists); the input is not modified. Pure, thread-safe. The keys of
    a state's ``plugins`` map are plugin names, which name no secret: a plugin called
    ``token_budget`` keeps its state, and the secret-looking keys inside it go.

    Args:
        state: A snapshot's state (or any mapping).

    Returns:
        A new dict with every secret-looking key (see the module docstring) removed, but
        for those whose value cannot be a secret (a number, say).
    """
    result: dict[str, Any] = _redact(state)
    plugins = state.get("plugins") if isinstance(state, Mapping) else None
    if isinstance(plugins, Mapping) and "plugins" in result:
        result["plugins"] = {name: _redact(value) for name, value in plugins.items()}
    return result
