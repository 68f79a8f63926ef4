"""``EncryptionKeys`` (issue 13, item 7): where keys come from, which one encrypts, what
is refused, and that key bytes never show in a repr, a pickle or an error message."""

from __future__ import annotations

import base64
import copy
import pickle
from typing import Any

import cloudpickle
import pytest

from supervisor import EncryptionKeys, InvalidEncryptionKeys

K1, K2, K3 = (bytes([n]) * 16 + bytes(range(16)) for n in (1, 2, 3))


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_the_first_key_is_current_unless_another_is_named() -> None:
    ring = EncryptionKeys({"new": K2, "old": K1})
    assert (ring.current_id, ring.key_ids) == ("new", ("new", "old"))
    pairs = EncryptionKeys([("old", K1), ("new", K2)], current="new")
    assert (pairs.current_id, pairs.key_ids) == ("new", ("new", "old"))
    assert pairs._key_for("old") == K1
    assert pairs._key_for("other") is None


def test_key_bytes_are_in_no_repr_and_the_ring_refuses_to_be_pickled() -> None:
    ring = EncryptionKeys({"k1": K1, "k2": K2})
    shown = repr(ring) + str(ring)
    assert shown == 2 * "EncryptionKeys(current='k1', key_ids=('k1', 'k2'))"
    for dump in (pickle.dumps, cloudpickle.dumps, copy.copy):
        with pytest.raises(TypeError, match="cannot be pickled: keys never leave the process"):
            dump(ring)


@pytest.mark.parametrize(
    ("keys", "kwargs", "words"),
    [
        ({}, {}, "no encryption key was given; give at least one (make one with"),
        ([], {}, "no encryption key was given"),
        ({"": K1}, {}, "key id '' is not 1-64 characters"),
        ({"a b": K1}, {}, "key id 'a b' is not 1-64 characters of A-Z a-z 0-9 . _ -"),
        ({"x" * 65: K1}, {}, "is not 1-64 characters"),
        ([(7, K1)], {}, "key id 7 is not"),
        ([("k1", K1), ("k1", K2)], {}, "key id 'k1' is given twice; keep one entry per id"),
        ({"k1": K1, "k2": K1}, {}, "keys 'k1' and 'k2' are the same key"),
        ({"k1": _b64(K1)}, {}, "key 'k1' is of type str, not bytes; decode it first"),
        ({"k1": K1[:16]}, {}, "key 'k1' is 16 bytes; AES-256-GCM needs exactly 32 random bytes"),
        ({"k1": K1 + b"!"}, {}, "key 'k1' is 33 bytes"),
        ({"k1": K1}, {"current": "k9"}, "current key 'k9' is not among the keys given ('k1')"),
        (K1, {}, "keys must be a mapping or (key_id, key) pairs, not a single bytes"),
        (["k1"], {}, "each key entry must be a (key_id, key) pair"),
    ],
    ids=["empty", "no-pairs", "empty-id", "space-in-id", "long-id", "int-id", "same-id",
         "same-key", "text-key", "short-key", "long-key", "unknown-current", "bare-bytes",
         "not-a-pair"],
)  # fmt: skip
def test_bad_keys_are_refused_saying_what_to_do(keys: Any, kwargs: Any, words: str) -> None:
    with pytest.raises(InvalidEncryptionKeys) as info:
        EncryptionKeys(keys, **kwargs)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)
    for key in (K1, K2):  # never the key itself, raw or encoded
        assert _b64(key) not in str(info.value)
        assert repr(key)[2:-1] not in str(info.value)


def test_from_env_reads_id_colon_base64_entries_the_first_current() -> None:
    urlsafe = base64.urlsafe_b64encode(K3).decode()
    text = f" k2:{_b64(K2)} ,k1:{_b64(K1)},k3:{urlsafe}"
    ring = EncryptionKeys.from_env(environ={"SESSIONVISOR_KEYS": text})
    assert ring.key_ids == ("k2", "k1", "k3")
    assert [ring._key_for(key_id) for key_id in ring.key_ids] == [K2, K1, K3]
    other = EncryptionKeys.from_env("MY_KEYS", environ={"MY_KEYS": f"a:{_b64(K1)}"})
    assert other.key_ids == ("a",)


def test_from_env_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSIONVISOR_KEYS", f"prod-1:{_b64(K1)}")
    assert EncryptionKeys.from_env().current_id == "prod-1"


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({}, "environment variable SESSIONVISOR_KEYS is not set or empty; set it to "
             "'key_id:base64key[,key_id:base64key...]' with the current key first"),
        ({"SESSIONVISOR_KEYS": "  "}, "is not set or empty"),
        ({"SESSIONVISOR_KEYS": f"k1:{_b64(K1)},{_b64(K2)}"},
         "entry 2 of SESSIONVISOR_KEYS has no ':'; write each entry as key_id:base64key"),
        ({"SESSIONVISOR_KEYS": f"k1:{_b64(K1)[:-3]}*=="},
         "entry 1 ('k1') of SESSIONVISOR_KEYS is not valid base64"),
        ({"SESSIONVISOR_KEYS": f"k1:{_b64(K1[:24])}"}, "key 'k1' is 24 bytes"),
        ({"SESSIONVISOR_KEYS": f"k1:{_b64(K1)},k1:{_b64(K2)}"}, "key id 'k1' is given twice"),
    ],
    ids=["unset", "blank", "no-colon", "bad-base64", "short-key", "same-id"],
)  # fmt: skip
def test_from_env_refuses_malformed_entries_without_quoting_keys(
    environ: dict[str, str], words: str
) -> None:
    with pytest.raises(InvalidEncryptionKeys) as info:
        EncryptionKeys.from_env(environ=environ)
    assert words in str(info.value)
    for key in (K1, K2):
        assert _b64(key)[:20] not in str(info.value)


def test_from_callback_asks_again_for_a_key_it_lacks_and_keeps_its_current_key() -> None:
    calls: list[int] = []
    served = {"k1": K1}

    def provider() -> dict[str, bytes]:
        calls.append(1)
        return dict(served)

    ring = EncryptionKeys.from_callback(provider)
    assert (ring.key_ids, len(calls)) == (("k1",), 1)
    assert ring._key_for("k1") == K1
    assert len(calls) == 1  # a key it holds: no call
    served.clear()
    served.update({"k2": K2, "k1": K1})  # rotated elsewhere: k2 is current there now
    assert ring._key_for("k2") == K2
    assert len(calls) == 2
    assert ring.current_id == "k1"  # this ring still encrypts with the key it started with
    assert ring.key_ids == ("k1", "k2")
    assert ring._key_for("k9") is None
    assert len(calls) == 3


def test_from_callback_validates_what_the_provider_returns() -> None:
    with pytest.raises(InvalidEncryptionKeys, match="no encryption key was given"):
        EncryptionKeys.from_callback(dict)


def test_new_key_is_fit_to_be_a_key() -> None:
    first, second = EncryptionKeys.new_key(), EncryptionKeys.new_key()
    assert len(first) == 32
    assert first != second
    assert EncryptionKeys({"a": first, "b": second}).key_ids == ("a", "b")
