"""A ready redactor for ``Snapshot.redact``: drop keys that look like secrets.

The rule works on the *words* of a key: it is split at ``_``, ``-``, ``.``,
spaces and camelCase humps, then lower-cased (``X-Api-Key`` -> ``x api key``,
``accessToken`` -> ``access token``). A key is a secret when

* a word is ``token``, ``password``, ``passwd``, ``secret``, ``secrets``,
  ``authorization`` or ``apikey``, or
* two neighbouring words are ``api`` and ``key``.

So ``token``, ``access_token``, ``refresh_token``, ``token_id``, ``authToken``,
``api_key``, ``APIKey``, ``client_secret``, ``Authorization`` are dropped, while
``input_tokens``, ``output_tokens``, ``max_tokens`` (the plural ``tokens`` is a
count, not a credential), ``tokenizer``, ``keyboard`` and ``author`` are kept.
The word rule is deliberately narrower than "contains token": usage counts must
survive redaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

__all__ = ["is_secret_key", "redact_secrets"]

_SECRET_WORDS = frozenset(
    ("token", "password", "passwd", "secret", "secrets", "authorization", "apikey")
)
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[^a-z0-9]+")


def is_secret_key(key: str) -> bool:
    """Whether a dict key names a secret under the module's word rule. Pure, thread-safe."""
    words = [w for w in _SEPARATORS.split(_HUMP.sub("_", key).lower()) if w]
    if _SECRET_WORDS.intersection(words):
        return True
    return ("api", "key") in pairwise(words)


def _redact(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: _redact(v) for k, v in value.items() if not (isinstance(k, str) and is_secret_key(k))
        }
    if isinstance(value, list | tuple):
        return [_redact(v) for v in value]
    return value


def redact_secrets(state: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of ``state`` without the keys that look like secrets, at any depth.

    Use as ``snapshot.redact(redact_secrets)``. Walks dicts, lists and tuples
    (tuples become lists); the input is not modified. Pure, thread-safe.

    Args:
        state: A snapshot's state (or any mapping).

    Returns:
        A new dict with every secret-looking key (see the module docstring) removed.
    """
    result: dict[str, Any] = _redact(state)
    return result
