"""The quick check of flat metadata and plugin states judges exactly as the full walk.

A session's metadata is checked where the session is made, and its plugins' states after
``session_start`` and after every turn without a checkpoint. Most are a few keys of plain
scalars (a tenant, a counter), for which the walk and encoding cost more than ten times a
look at the keys: ``is_flat_plain`` lets those skip it. These tests hold it to the walk's
verdict, so nothing the walk refuses gets through the shortcut.
"""

from __future__ import annotations

import string
import threading
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import AgentSession, AgentTemplate, Plugin, PluginContext, PluginError
from actors._arguments import check_metadata
from actors._codec import decode_plain, encode_plain
from actors._strip import STRIPPED_KEY, is_flat_plain, strip_live

# Text with lone surrogates too (``st.text`` leaves them out), which no checkpoint holds.
_TEXT = st.one_of(
    st.text(max_size=6),
    st.text(string.printable, max_size=6),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2),
    st.sampled_from(["tenant", "café", "t\udcff"]),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.integers(min_value=-(2**65), max_value=2**65),  # past the 64-bit range both ways
    st.sampled_from([-(2**63), -(2**63) - 1, 2**64 - 1, 2**64]),  # the range's edges
    _TEXT,
)
_OTHERS = st.one_of(
    st.lists(st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.binary(max_size=4),
    st.just(threading.Lock()),
    st.just(object()),
)
_KEYS = st.one_of(_TEXT, st.just(STRIPPED_KEY), st.integers(0, 3))
_ASCII = st.one_of(st.text(string.ascii_letters + "_", max_size=6), st.just(STRIPPED_KEY))
# Mostly flat dicts of scalars, where the quick check answers; some with other values.
_DICTS = st.one_of(
    st.dictionaries(_ASCII, _SCALARS, max_size=3),
    st.dictionaries(_TEXT, _SCALARS, max_size=3),
    st.dictionaries(_KEYS, st.one_of(_SCALARS, _OTHERS), max_size=4),
)


def _verdict(metadata: Any) -> tuple[str, str] | None:
    """What ``check_metadata`` raised (its type and message), or ``None``."""
    try:
        check_metadata(metadata)
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)
    return None


@settings(max_examples=400, deadline=None)
@given(_DICTS)
def test_the_quick_check_of_metadata_agrees_with_the_full_walk(metadata: dict[Any, Any]) -> None:
    walked = _verdict(types.MappingProxyType(metadata))  # not a dict: always the walk
    assert _verdict(metadata) == walked


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_ASCII, _SCALARS, max_size=3))
def test_a_flat_plain_dict_has_nothing_to_strip_and_reads_back_equal(value: dict[Any, Any]) -> None:
    if not is_flat_plain(value):
        return  # the walk judges it: the test above
    assert strip_live(value) == (value, ())
    assert decode_plain(encode_plain(value)) == value


@pytest.mark.parametrize(
    ("value", "flat"),
    [
        ({"tenant_id": "t", "n": 2**64 - 1, "low": -(2**63), "f": 0.5, "ok": True}, True),
        ({"none": None}, True),
        ({}, True),
        ({"n": 2**64}, False),  # past the range: refused by the walk
        ({"n": -(2**63) - 1}, False),
        ({"t": "bad \udcff"}, False),  # a lone surrogate: refused by the walk
        ({"t": "café"}, False),  # storable, but non-ASCII text is the walk's to judge
        ({"é": 1}, False),
        ({STRIPPED_KEY: "x", "other": 1}, False),
        ({"nested": {"a": 1}}, False),
        ({"seq": [1]}, False),
        ({1: "x"}, False),
        (types.MappingProxyType({"a": 1}), False),
    ],
    ids=[
        "scalars",
        "none",
        "empty",
        "int-high",
        "int-low",
        "surrogate",
        "non-ascii-value",
        "non-ascii-key",
        "marker-key",
        "nested",
        "list",
        "int-key",
        "not-a-dict",
    ],
)
def test_which_dicts_are_flat_and_plain(value: Any, flat: bool) -> None:
    assert is_flat_plain(value) is flat


class _Sets(Plugin):
    """Puts ``value`` into its state in ``session_start``."""

    name = "sets"

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.update(self.value)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"t": "bad \udcff"}, "state.plugins.sets.t"),
        ({"n": 2**64}, "state.plugins.sets.n"),
        ({"s": {1, 2}}, "state.plugins.sets.s"),
    ],
    ids=["surrogate", "int", "set"],
)
def test_a_flat_state_no_checkpoint_can_hold_still_fails_the_start(
    value: dict[str, Any], path: str
) -> None:
    with pytest.raises(PluginError) as caught:
        AgentSession.start(AgentTemplate(model="echo", plugins=[_Sets(value)]))
    assert caught.value.plugin == "sets"
    assert path in str(caught.value.error)


def test_a_flat_plain_state_starts_and_is_kept_in_the_snapshot() -> None:
    value = {"tenant": "t", "count": 3, "ratio": 0.5, "on": True, "none": None}
    ref = AgentSession.start(AgentTemplate(model="echo", plugins=[_Sets(value)]))
    try:
        snapshot = ref.proxy().snapshot().get(timeout=5.0)
    finally:
        ref.stop()
    assert snapshot.state["plugins"]["sets"] == value
    assert snapshot.stripped_fields == ()


def test_a_live_value_beside_flat_ones_is_still_stripped() -> None:
    """A lock in a plugin's state is live: stripped from the snapshot, not refused."""
    ref = AgentSession.start(
        AgentTemplate(model="echo", plugins=[_Sets({"n": 1, "lock": threading.Lock()})])
    )
    try:
        snapshot = ref.proxy().snapshot().get(timeout=5.0)
    finally:
        ref.stop()
    assert snapshot.state["plugins"]["sets"]["n"] == 1
    assert snapshot.stripped_fields == ("plugins.sets.lock",)
