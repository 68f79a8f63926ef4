"""EchoModel, ScriptedModel and ProviderRegistry."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from actors import (
    ActorsError,
    EchoModel,
    Message,
    Model,
    ModelResponse,
    ModelScriptExhausted,
    ProviderRegistry,
    RegistryProfileMissing,
    ScriptedModel,
    Tool,
    ToolCall,
    UnknownModel,
    Usage,
    tool,
)

WAIT = 5.0


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS: list[Tool] = [add]


# -- EchoModel ---------------------------------------------------------------------


def test_echo_model_is_a_model() -> None:
    assert isinstance(EchoModel(), Model)
    assert isinstance(ScriptedModel([]), Model)


def test_echo_answers_with_the_last_user_message() -> None:
    messages = [
        Message.system("be brief"),
        Message.user("first"),
        Message.assistant("echo: first"),
        Message.user("hello there"),
    ]
    response = EchoModel().generate(messages, [])
    assert response.message.role == "assistant"
    assert response.message.content == "echo: hello there"
    assert response.message.tool_calls == ()


def test_echo_without_user_message_answers_empty_echo() -> None:
    response = EchoModel().generate([Message.system("only instructions")], [])
    assert response.message.content == "echo: "


def test_echo_usage_counts_words() -> None:
    messages = [Message.system("one two"), Message.user("three four five")]
    response = EchoModel().generate(messages, [])
    # input: 2 + 3 words; output: "echo: three four five" is 4 words.
    assert response.usage == Usage(5, 4)
    assert response.usage.total == 9


def test_echo_input_tokens_count_only_what_follows_the_last_answer() -> None:
    messages = [
        Message.user("one two three"),
        Message.assistant("echo: one two three"),
        Message.user("four five"),
    ]
    assert EchoModel().generate(messages, []).usage == Usage(2, 3)


def test_echo_slash_tool_emits_a_tool_call() -> None:
    messages = [Message.user('/add {"a": 2, "b": 3}')]
    response = EchoModel().generate(messages, TOOLS)
    assert response.message.content is None
    (call,) = response.message.tool_calls
    assert call.name == "add"
    assert call.arguments == {"a": 2, "b": 3}
    assert call.id
    assert response.usage == Usage(5, 1)  # five whitespace-separated words in


def test_echo_answers_with_the_tool_result() -> None:
    call = ToolCall("call_1", "add", {"a": 2, "b": 3})
    messages = [
        Message.user('/add {"a": 2, "b": 3}'),
        Message.assistant(None, (call,)),
        Message.tool(call, "5"),
    ]
    response = EchoModel().generate(messages, TOOLS)
    assert response.message.tool_calls == ()
    assert response.message.content == "add returned: 5"


def test_echo_slash_tool_without_arguments_calls_with_empty_dict() -> None:
    response = EchoModel().generate([Message.user("/add")], TOOLS)
    (call,) = response.message.tool_calls
    assert call.arguments == {}


def test_echo_unknown_tool_name_is_echoed() -> None:
    response = EchoModel().generate([Message.user('/nope {"a": 1}')], TOOLS)
    assert response.message.tool_calls == ()
    assert response.message.content == 'echo: /nope {"a": 1}'


def test_echo_tool_name_needs_the_tool_to_be_offered() -> None:
    response = EchoModel().generate([Message.user('/add {"a": 1, "b": 2}')], [])
    assert response.message.tool_calls == ()
    assert response.message.content == 'echo: /add {"a": 1, "b": 2}'


def test_echo_invalid_json_arguments_give_a_clear_answer() -> None:
    response = EchoModel().generate([Message.user("/add {a: 1")], TOOLS)
    assert response.message.tool_calls == ()
    content = response.message.content or ""
    assert "cannot call add" in content
    assert "not valid JSON" in content


@pytest.mark.parametrize("args", ["[1, 2]", "3", '"text"', "null"])
def test_echo_non_object_arguments_give_a_clear_answer(args: str) -> None:
    response = EchoModel().generate([Message.user(f"/add {args}")], TOOLS)
    assert response.message.tool_calls == ()
    assert response.message.content == "echo: cannot call add: arguments must be a JSON object"


def test_echo_model_string() -> None:
    assert EchoModel.model_string == "echo"


# -- ScriptedModel -----------------------------------------------------------------


def test_scripted_returns_responses_in_order() -> None:
    custom = ModelResponse(Message.assistant("custom"), Usage(7, 8), {"conversation": "x"})
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    message = Message.assistant(None, (call,))
    model = ScriptedModel(["plain", message, custom])
    prompt = [Message.user("a b c")]

    first = model.generate(prompt, TOOLS)
    assert first.message == Message.assistant("plain")
    assert first.usage == Usage(3, 1)

    second = model.generate(prompt, TOOLS)
    assert second.message is message
    assert second.usage == Usage(3, 0)

    third = model.generate(prompt, TOOLS)
    assert third is custom


def test_scripted_raises_exception_items_and_goes_on() -> None:
    boom = RuntimeError("model down")
    model = ScriptedModel([boom, "after"])
    with pytest.raises(RuntimeError, match="model down") as info:
        model.generate([], [])
    assert info.value is boom
    assert model.generate([], []).message.content == "after"


def test_scripted_exhausted_raises_clear_error() -> None:
    model = ScriptedModel(["only"])
    model.generate([], [])
    with pytest.raises(ModelScriptExhausted) as info:
        model.generate([], [])
    error = info.value
    assert isinstance(error, ActorsError)
    assert isinstance(error, RuntimeError)
    assert error.given == 1
    assert "ran out of responses after 1" in str(error)
    assert "one response per expected model call" in str(error)
    # Still exhausted on the next call.
    with pytest.raises(ModelScriptExhausted):
        model.generate([], [])


def test_scripted_empty_script_is_exhausted_at_once() -> None:
    with pytest.raises(ModelScriptExhausted, match="after 0"):
        ScriptedModel([]).generate([], [])


def test_scripted_remaining_counts_down() -> None:
    script: list[str | BaseException] = ["a", "b", ValueError("x")]
    model = ScriptedModel(iter(script))  # any iterable, consumed once
    assert model.remaining == 3
    model.generate([], [])
    assert model.remaining == 2
    model.generate([], [])
    with pytest.raises(ValueError, match="x"):
        model.generate([], [])
    assert model.remaining == 0
    with pytest.raises(ModelScriptExhausted):
        model.generate([], [])
    assert model.remaining == 0


def test_scripted_is_thread_safe_each_response_used_once() -> None:
    n_threads, per_thread = 8, 250
    total = n_threads * per_thread
    model = ScriptedModel([str(i) for i in range(total)])
    start = threading.Barrier(n_threads)

    def drain() -> list[str]:
        start.wait(WAIT)
        got: list[str] = []
        while True:
            try:
                got.append(model.generate([], []).message.content or "")
            except ModelScriptExhausted:
                return got

    with ThreadPoolExecutor(n_threads) as pool:
        futures = [pool.submit(drain) for _ in range(n_threads)]
        results = [f.result(timeout=WAIT) for f in futures]

    seen = [item for got in results for item in got]
    assert sorted(seen, key=int) == [str(i) for i in range(total)]
    assert model.remaining == 0
    # Each thread saw its share in script order.
    for got in results:
        assert [int(x) for x in got] == sorted(int(x) for x in got)


# -- ProviderRegistry --------------------------------------------------------------


class NamedModel:
    """A trivial model remembering the id it was built for."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.model_string = model_id

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        return ModelResponse(Message.assistant(self.model_id))


def test_registry_knows_echo_by_default() -> None:
    model = ProviderRegistry().lookup("echo")
    assert isinstance(model, EchoModel)


def test_registry_without_builtins_is_empty() -> None:
    registry = ProviderRegistry(builtins=False)
    with pytest.raises(UnknownModel, match="'echo'"):
        registry.lookup("echo")


def test_registry_plain_names() -> None:
    registry = ProviderRegistry()
    seen: list[str] = []

    def factory(name: str) -> Model:
        seen.append(name)
        return NamedModel(name)

    registry.add_model("tiny", factory)
    model = registry.lookup("tiny")
    assert isinstance(model, NamedModel)
    assert model.model_id == "tiny"
    assert seen == ["tiny"]


@pytest.mark.parametrize("name", ["", "registry:x"])
def test_registry_rejects_bad_plain_names(name: str) -> None:
    with pytest.raises(ValueError, match="plain model names"):
        ProviderRegistry().add_model(name, NamedModel)


def test_registry_unknown_plain_name() -> None:
    with pytest.raises(UnknownModel) as info:
        ProviderRegistry().lookup("gpt-nothing")
    assert "'gpt-nothing'" in str(info.value)
    assert "add_model" in str(info.value)
    assert isinstance(info.value, LookupError)


def test_registry_profile_calls_factory_with_model_id() -> None:
    registry = ProviderRegistry()
    calls: list[str] = []

    def factory(model_id: str) -> Model:
        calls.append(model_id)
        return NamedModel(model_id)

    registry.register("p", "prov", factory)
    model = registry.lookup("registry:p:prov:big-model-1")
    assert isinstance(model, NamedModel)
    assert model.model_id == "big-model-1"
    # The model id may itself contain colons.
    registry.lookup("registry:p:prov:org:model:v2")
    assert calls == ["big-model-1", "org:model:v2"]
    assert registry.profiles() == ["p"]


def test_registry_missing_profile_carries_its_name() -> None:
    registry = ProviderRegistry()
    with pytest.raises(RegistryProfileMissing) as info:
        registry.lookup("registry:work:openai:gpt")
    error = info.value
    assert error.profile == "work"
    assert "'work'" in str(error)
    assert "register" in str(error)
    assert isinstance(error, ActorsError)
    assert isinstance(error, LookupError)


def test_registry_reregister_replaces_and_unregister_forgets() -> None:
    registry = ProviderRegistry()
    registry.register("p", "prov", lambda i: NamedModel("first:" + i))
    registry.register("p", "prov", lambda i: NamedModel("second:" + i))
    model = registry.lookup("registry:p:prov:m")
    assert isinstance(model, NamedModel)
    assert model.model_id == "second:m"

    registry.unregister("p")
    assert registry.profiles() == []
    with pytest.raises(RegistryProfileMissing):
        registry.lookup("registry:p:prov:m")
    registry.unregister("p")  # a no-op when absent

    # Registering again after unregister works (as a host does after a restart).
    registry.register("p", "prov", NamedModel)
    assert isinstance(registry.lookup("registry:p:prov:m"), NamedModel)


def test_registry_re_register_with_another_provider() -> None:
    registry = ProviderRegistry()
    registry.register("p", "old", NamedModel)
    registry.register("p", "new", NamedModel)
    assert isinstance(registry.lookup("registry:p:new:m"), NamedModel)
    with pytest.raises(UnknownModel):
        registry.lookup("registry:p:old:m")


def test_registry_provider_mismatch_is_unknown_model() -> None:
    registry = ProviderRegistry()
    registry.register("p", "prov", NamedModel)
    with pytest.raises(UnknownModel) as info:
        registry.lookup("registry:p:other:m")
    message = str(info.value)
    assert "'p'" in message
    assert "'prov'" in message
    assert "'other'" in message


@pytest.mark.parametrize(
    "model_string",
    [
        "registry:",
        "registry:p",
        "registry:p:prov",
        "registry:p:prov:",
        "registry::prov:m",
        "registry:p::m",
    ],
)
def test_registry_malformed_strings_are_unknown_model(model_string: str) -> None:
    registry = ProviderRegistry()
    registry.register("p", "prov", NamedModel)
    with pytest.raises(UnknownModel) as info:
        registry.lookup(model_string)
    assert "registry:<profile>:<provider>:<model_id>" in str(info.value)


@pytest.mark.parametrize(
    ("profile", "provider", "label"),
    [
        ("", "prov", "profile"),
        ("a:b", "prov", "profile"),
        ("p", "", "provider"),
        ("p", "x:y", "provider"),
    ],
)
def test_registry_rejects_invalid_names(profile: str, provider: str, label: str) -> None:
    registry = ProviderRegistry()
    with pytest.raises(ValueError, match=f"^{label} must be") as info:
        registry.register(profile, provider, NamedModel)
    assert repr(profile if label == "profile" else provider) in str(info.value)
    assert registry.profiles() == []


def test_unknown_model_is_an_actors_error() -> None:
    assert issubclass(UnknownModel, ActorsError)


def test_registry_concurrent_register_and_lookup() -> None:
    registry = ProviderRegistry()
    n_threads, rounds = 8, 200
    start = threading.Barrier(n_threads)

    def worker(index: int) -> int:
        start.wait(WAIT)
        profile = f"p{index}"
        looked_up = 0
        for round_ in range(rounds):
            registry.register(profile, "prov", NamedModel)
            model = registry.lookup(f"registry:{profile}:prov:m{round_}")
            assert isinstance(model, NamedModel)
            assert model.model_id == f"m{round_}"
            assert isinstance(registry.lookup("echo"), EchoModel)
            registry.unregister(profile)
            with pytest.raises(RegistryProfileMissing):
                registry.lookup(f"registry:{profile}:prov:m")
            registry.register(profile, "prov", NamedModel)
            looked_up += 1
        return looked_up

    with ThreadPoolExecutor(n_threads) as pool:
        futures = [pool.submit(worker, i) for i in range(n_threads)]
        assert [f.result(timeout=WAIT) for f in futures] == [rounds] * n_threads
    assert registry.profiles() == sorted(f"p{i}" for i in range(n_threads))
