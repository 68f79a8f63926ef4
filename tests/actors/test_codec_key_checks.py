"""``check_keys`` refuses a non-``str`` dict key at any depth, and only that (in a value
``pack_plain`` accepts, as its callers pass: no text or integer msgpack cannot store).

Its first level takes a shortcut (a flat dict of scalars, such as a session's usage,
is checked in one ``str.join``), so the verdict is compared, over random nested
values, with a plain recursive search for such a key.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors._codec import INT_MAX, INT_MIN, check_keys
from actors.errors import SnapshotEncodeError

_KEYS = st.one_of(st.text(max_size=3), st.integers(-3, 3), st.binary(max_size=2))
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(INT_MIN, INT_MAX), st.text(max_size=4))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=20,
)


def _has_bad_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(type(k) is not str or _has_bad_key(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_bad_key(item) for item in value)
    return False


def _refused(value: Any) -> bool:
    if not _has_bad_key(value):
        check_keys(value, root="state")  # must not raise
        return False
    with pytest.raises(SnapshotEncodeError, match="is not a str"):
        check_keys(value, root="state")
    return True


@given(_VALUES)
def test_a_value_is_refused_exactly_when_a_dict_in_it_has_a_key_that_is_not_a_str(
    value: Any,
) -> None:
    assert _refused(value) == _has_bad_key(value)


@given(st.dictionaries(_KEYS, _SCALARS, max_size=6))
def test_a_flat_dict_is_refused_exactly_when_a_key_is_not_a_str(value: dict[Any, Any]) -> None:
    assert _refused(value) == any(type(key) is not str for key in value)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"input_tokens": 1, 2: 3}, "state[2]"),
        ({"a": 1, "b": {"c": [{"d": 1}, {b"e": 2}]}}, "state.b.c[1][b'e']"),
    ],
)
def test_the_refusal_names_where_the_key_is(value: dict[Any, Any], path: str) -> None:
    with pytest.raises(SnapshotEncodeError, match=re.escape(path)):
        check_keys(value, root="state")
