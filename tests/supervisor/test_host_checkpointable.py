"""The invariant of issue 13: no input leaves a session unable to take its next checkpoint.

Random conversations feed a session adversarial user text (lone surrogates
included), tool results (such text, large integers, nested values) and model
tool-call arguments (integers beyond 64 bits). After every turn, either it
succeeded and the latest checkpoint holds exactly the session's history, or it
raised the documented error for refused input and the durable state is unchanged.
At the end a new host resumes the session to the same history.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import (
    AgentTemplate,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    SnapshotEncodeError,
    Tool,
    ToolCall,
    Usage,
    is_secret_key,
    is_secret_value,
    tool,
)
from supervisor import AgentHost, MemoryCheckpointStore

any_text = st.text(alphabet=st.characters(exclude_categories=()), max_size=12)
tool_values = st.recursive(
    st.one_of(any_text, st.integers(), st.booleans(), st.none()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=6,
)
turns = st.lists(
    st.tuples(any_text, tool_values, st.integers(min_value=-(2**80), max_value=2**80), any_text),
    min_size=1,
    max_size=5,
)


class Plan:
    """What the model and the tool do next; shared by both, in this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.steps: deque[tuple[Any, int, str]] = deque()
        self.result: Any = None


class PlannedModel:
    """Calls ``give`` with the planned argument, then answers with the planned text."""

    model_string = "planned"

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        with self.plan.lock:
            value, argument, answer = self.plan.steps[0]
            if messages[-1].role == "user":
                self.plan.result = value
                call = ToolCall("c", "give", {"n": argument})
                return ModelResponse(Message.assistant(None, (call,)), Usage(1, 1))
            self.plan.steps.popleft()
            return ModelResponse(Message.assistant(answer), Usage(1, 1))


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _template(plan: Plan) -> AgentTemplate:
    @tool
    def give(n: int) -> Any:
        """Return the planned value."""
        with plan.lock:
            return plan.result

    return AgentTemplate(model=PlannedModel(plan), tools=[give])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns)
def test_every_turn_leaves_the_session_checkpointable(
    steps: list[tuple[str, Any, int, str]],
) -> None:
    store = MemoryCheckpointStore()
    plan = Plan()
    with AgentHost(store) as host:
        sid = host.start_session(_template(plan), "s")
        host.checkpoint(sid)
        for text, value, argument, answer in steps:
            before = store.load(sid)
            if not _storable(text):  # refused input: nothing runs, nothing changes
                with pytest.raises(ValueError, match="lone surrogate"):
                    host.send(sid, text)
                assert store.load(sid) == before
                continue
            plan.steps.append((value, argument, answer))
            host.send(sid, text)
            assert store.load(sid).messages() == host.history(sid)
        history = host.history(sid)
        host.checkpoint(sid)
    with AgentHost(store) as again:
        again.resume(sid, _template(Plan()))
        assert again.history(sid) == history


storable_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=8)
# Not what the host's default redaction (strip_secrets) replaces: an ``APIKEY`` key, a
# ``Bearer x`` value. That a checkpoint holds no secret is tested on its own.
kept_text = storable_text.filter(lambda text: not is_secret_value(text))
kept_keys = storable_text.filter(lambda key: not is_secret_key(key))
plain_values = st.recursive(
    st.one_of(kept_text, st.integers(-(2**63), 2**64 - 1), st.booleans(), st.none()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(kept_keys, inner, max_size=3),
    max_leaves=6,
)
poison_values = st.one_of(
    st.sets(st.integers(), min_size=1, max_size=3),
    st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2),
    st.integers(min_value=2**64, max_value=2**80),
    st.datetimes(),  # naive: no checkpoint can say which time it was
    st.builds(object),
    st.text(
        alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2
    ),
)
plugin_turns = st.lists(
    st.one_of(st.tuples(st.just(True), plain_values), st.tuples(st.just(False), poison_values)),
    min_size=1,
    max_size=6,
)


class Keeper(Plugin):
    """Puts the planned value into its state after each turn, under a key per turn."""

    name = "keeper"

    def __init__(self, planned: deque[Any]) -> None:
        self.planned = planned

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state[f"turn-{len(ctx.state)}"] = self.planned.popleft()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plugin_turns, st.sampled_from([1, None]))
def test_plugin_state_a_checkpoint_cannot_hold_never_outlives_its_turn(
    steps: list[tuple[bool, Any]], checkpoint_every: int | None
) -> None:
    store = MemoryCheckpointStore()
    planned: deque[Any] = deque()
    template = AgentTemplate(plugins=(Keeper(planned),))
    with AgentHost(store, checkpoint_every=checkpoint_every) as host:
        sid = host.start_session(template, "s")
        durable = host.checkpoint(sid)
        for index, (storable, value) in enumerate(steps):
            planned.append(value)
            if storable:
                host.send(sid, f"turn {index}")
                durable = host.checkpoint(sid)
                assert durable.messages() == host.history(sid)
                assert list(durable.state["plugins"]["keeper"].values())[-1] == value
            else:  # the turn fails, and everything is as after the last good one
                with pytest.raises(SnapshotEncodeError, match=r"at state\.plugins\.keeper\.turn-"):
                    host.send(sid, f"turn {index}")
                now = host.checkpoint(sid)
                assert now.messages() == durable.messages()
                assert now.state["plugins"] == durable.state["plugins"]
        history = host.history(sid)
    with AgentHost(store) as again:
        again.resume(sid, AgentTemplate(plugins=(Keeper(deque()),)))
        assert again.history(sid) == history
