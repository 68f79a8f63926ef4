"""The prompt a session hands its model: a view that reads like the list it replaces."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors import AgentSession, AgentTemplate, Message, ModelResponse, Tool
from actors._prompt import PromptView

texts = st.lists(st.text(max_size=5), max_size=8)
indexes = st.integers(min_value=-12, max_value=12)
bounds = st.none() | indexes
steps = st.none() | st.sampled_from([1, 2, -1, -2])


def _pair(system: str | None, contents: list[str]) -> tuple[PromptView, list[Message]]:
    messages = [Message.user(c) for c in contents]
    head = [] if system is None else [Message.system(system)]
    return PromptView(head[0] if head else None, messages), head + messages


@given(system=st.none() | st.text(max_size=5), contents=texts, index=indexes)
def test_indexing_matches_the_list(system: str | None, contents: list[str], index: int) -> None:
    view, expected = _pair(system, contents)
    assert len(view) == len(expected)
    if -len(expected) <= index < len(expected):
        assert view[index] == expected[index]
    else:
        with pytest.raises(IndexError):
            view[index]


@given(
    system=st.none() | st.text(max_size=5),
    contents=texts,
    start=bounds,
    stop=bounds,
    step=steps,
)
def test_slices_iteration_and_equality_match_the_list(
    system: str | None, contents: list[str], start: int | None, stop: int | None, step: int | None
) -> None:
    view, expected = _pair(system, contents)
    assert view[start:stop:step] == expected[start:stop:step]
    assert list(view) == expected
    assert list(reversed(view)) == expected[::-1]
    assert view == expected
    assert view == tuple(expected)
    assert view != [*expected, Message.user("more")]


def test_view_does_not_see_messages_appended_after_it_was_made() -> None:
    messages = [Message.user("a")]
    view = PromptView(None, messages)
    messages.append(Message.user("b"))
    assert list(view) == [Message.user("a")]
    assert view.count(Message.user("b")) == 0


class _KeepingModel:
    """Keeps every prompt object it was given, to read it later."""

    model_string = "keeping"

    def __init__(self) -> None:
        self.prompts: list[Sequence[Message]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.prompts.append(messages)
        last = messages[-1].content or ""
        if last.startswith("!fail"):
            raise RuntimeError("model down")
        return ModelResponse(Message.assistant(f"re: {last}"))


def test_a_prompt_a_model_kept_stays_as_it_was_across_later_and_failed_turns() -> None:
    model = _KeepingModel()
    session = AgentSession(AgentTemplate(model=model, instructions="be brief"))
    session.send("one")
    first = list(model.prompts[0])
    with pytest.raises(RuntimeError, match="model down"):
        session.send("!fail")
    failed = list(model.prompts[1])
    session.send("two")

    assert first == [Message.system("be brief"), Message.user("one")]
    assert list(model.prompts[0]) == first
    assert list(model.prompts[1]) == failed
    assert failed[-1] == Message.user("!fail")
    assert [m.content for m in model.prompts[2]] == [
        "be brief",
        "one",
        "re: one",
        "two",
    ]
    assert [m.content for m in session.history()] == ["one", "re: one", "two", "re: two"]
