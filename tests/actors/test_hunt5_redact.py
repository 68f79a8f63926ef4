"""Secret keys the word rule of ``actors.redact`` missed, found by a bug hunt: a key that
holds several credentials (``api_keys``, ``privateKeys``) and a key whose secret word
follows an acronym (``HTTPToken``, ``IDToken``: the hump rule split only lower-to-upper,
so they read as one word ``httptoken``) went into every checkpoint in clear."""

from __future__ import annotations

import pytest

from actors import Snapshot
from actors.redact import SECRET_MARKER, is_secret_key, strip_secrets


@pytest.mark.parametrize(
    "key", ["api_keys", "apiKeys", "API_KEYS", "privateKeys", "HTTPToken", "IDToken", "JWTSecret"]
)
def test_keys_that_name_secrets_are_secret(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key", ["MAXTokens", "GPTTokens", "XMLTokenizer", "JSONKeyboard", "input_tokens", "author"]
)
def test_counts_and_look_alikes_are_still_kept(key: str) -> None:
    assert not is_secret_key(key)


def test_strip_secrets_takes_them_out_of_a_checkpoint() -> None:
    state = {
        "plugins": {
            "search": {
                "api_keys": ["k-one", "k-two"],
                "HTTPToken": "opaque",
                "maxTokens": 512,
                "region": "eu",
            }
        }
    }
    snapshot = Snapshot.new(session_id="s", state=state)

    stripped = strip_secrets(snapshot)

    assert stripped.state["plugins"]["search"] == {
        "api_keys": SECRET_MARKER,
        "HTTPToken": SECRET_MARKER,
        "maxTokens": 512,
        "region": "eu",
    }
    assert {
        "plugins.search.api_keys",
        "plugins.search.HTTPToken",
    } <= set(stripped.stripped_fields)
