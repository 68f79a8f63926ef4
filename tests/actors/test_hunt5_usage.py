"""``Usage`` checks its counts when it is built, found by a bug hunt: ``Usage(-1)``,
``Usage(1.5)``, ``Usage(True)`` and ``Usage(None)`` were all accepted, and broke later and
far away (a sum raising ``TypeError`` in a host's usage counter, a negative bill in the
metrics, a checkpoint that saved but could not be resumed). Usage read from a checkpoint
is checked as it always was: old checkpoints load, malformed ones fail as before."""

from __future__ import annotations

import enum
import pickle
from pathlib import Path
from typing import Any, cast

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    InvalidMessage,
    Message,
    ModelResponse,
    Snapshot,
    SnapshotDecodeError,
    Usage,
)

WAIT = 5.0
FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")
FIXTURE = Path(__file__).parent / "fixtures" / "snapshot_v1.msgpack"


class Count(enum.IntEnum):
    THREE = 3


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    ("value", "error", "shown"),
    [
        (-1, ValueError, "got -1"),
        (1.5, TypeError, "got 1.5 (float)"),
        (2.0, TypeError, "got 2.0 (float)"),
        (True, TypeError, "got True (bool)"),
        (None, TypeError, "got None (NoneType)"),
        ("3", TypeError, "got '3' (str)"),
    ],
    ids=["negative", "float", "integral-float", "bool", "none", "str"],
)
def test_a_count_that_is_not_a_non_negative_int_is_refused_naming_the_field(
    field: str, value: Any, error: type[Exception], shown: str
) -> None:
    with pytest.raises(error, match="non-negative int") as refused:
        Usage(**{field: value})
    assert f"Usage.{field}" in str(refused.value)
    assert shown in str(refused.value)


def test_an_int_subclass_is_kept_as_a_plain_int() -> None:
    usage = Usage(Count.THREE, Count.THREE)
    assert type(usage.input_tokens) is int
    assert usage.to_dict() == {
        "input_tokens": 3,
        "output_tokens": 3,
        "cached_input_tokens": 0,
        "reasoning_tokens": 0,
        "total": 6,
    }
    with pytest.raises(ValueError, match="got -3"):
        Usage(Count.THREE, -Count.THREE)


def test_good_usage_still_sums_copies_and_round_trips() -> None:
    total = Usage(10, 4, 6, 3) + Usage(2, 1, 1, 0)
    assert total == Usage(12, 5, 7, 3)
    assert pickle.loads(pickle.dumps(total)) == total
    assert Usage.from_dict(total.to_dict()) == total
    assert Usage.from_dict({"input_tokens": 1, "output_tokens": 2}) == Usage(1, 2)


@pytest.mark.parametrize(
    "data",
    [
        {"input_tokens": -1, "output_tokens": 0},
        {"input_tokens": 1.5, "output_tokens": 0},
        {"input_tokens": True, "output_tokens": 0},
        {"input_tokens": None, "output_tokens": 0},
    ],
)
def test_usage_from_a_dict_fails_as_it_did(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidMessage, match="input_tokens"):
        Usage.from_dict(data)


def test_an_old_checkpoint_loads_and_one_with_odd_usage_fails_as_it_did() -> None:
    old = Snapshot.deserialize(FIXTURE.read_bytes())
    assert isinstance(old.usage(), Usage)

    odd = Snapshot.new(session_id="s", state={"usage": {"input_tokens": -4, "output_tokens": 1}})
    with pytest.raises(SnapshotDecodeError, match=r"state\.usage"):
        odd.usage()


def test_a_model_that_builds_bad_usage_fails_its_turn_and_the_session_goes_on() -> None:
    answers = iter([None, 2])

    class Model:
        model_string = "counting"

        def generate(self, messages: Any, tools: Any) -> ModelResponse:
            return ModelResponse(Message.assistant("ok"), Usage(1, cast(int, next(answers))))

    ref = AgentSession.start(AgentTemplate(model=Model()))
    try:
        session = ref.proxy()
        with pytest.raises(TypeError, match=r"Usage.output_tokens .* got None"):
            session.send("hi").get(timeout=WAIT)
        assert session.history().get(timeout=WAIT) == []
        assert session.send("again").get(timeout=WAIT).content == "ok"
        assert session.usage().get(timeout=WAIT) == Usage(1, 2)
    finally:
        ref.stop(block=True, timeout=WAIT)
