"""A session with a tool on any OpenAI-compatible server, its answer streamed as it comes.

Needs ``pip install 'sessionvisor[openai]'`` and a server that speaks the Chat
Completions API: OpenAI itself, vLLM, Ollama, LM Studio, a LiteLLM proxy::

    python examples/openai_compatible.py --base-url http://localhost:11434/v1 --model llama3.2
    OPENAI_API_KEY=sk-... python examples/openai_compatible.py --model gpt-4.1-mini

The model string ``registry:local:openai:<model>`` names a profile of the
built-in ``openai`` provider, so the session could be resumed by a host that
registers the same profile; ``--workers 1`` runs it in a worker process, where
the adapter builds its own client. The API key comes from a per-tenant
``credentials`` callback (here: ``--api-key`` or ``OPENAI_API_KEY``) and is
never written to the checkpoints.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import openai

from actors import AgentTemplate, Event, ProviderRegistry, tool
from supervisor import AgentHost


@tool
def add(a: int, b: int) -> int:
    """Add two integers exactly.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def show(event: Event) -> None:
    """Print the answer as it streams, and each tool call as it happens."""
    if event.type == "delta" and event.data["kind"] == "text":
        print(event.data["text"], end="", flush=True)
    elif event.type == "tool_call":
        print(f"[tool call] {event.data['name']}({event.data['arguments']})", flush=True)
    elif event.type == "tool_result":
        print(f"[tool result] {event.data['content']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=None, help="the server's URL (default: OpenAI)")
    parser.add_argument("--model", default="gpt-4.1-mini", help="the model's name on the server")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "not-needed"))
    parser.add_argument("--workers", type=int, default=None, help="run in worker processes")
    parser.add_argument("--prompt", default="What is 1234 + 4321? Use the add tool.")
    args = parser.parse_args(argv)

    providers = ProviderRegistry()
    providers.register("local", "openai", base_url=args.base_url, stream=True)
    template = AgentTemplate(
        model=f"registry:local:openai:{args.model}",
        tools=[add],
        instructions="You are a precise assistant. Use tools for arithmetic.",
    )
    with (
        tempfile.TemporaryDirectory() as data_dir,
        AgentHost(
            providers=providers,
            data_dir=data_dir,
            workers=args.workers,
            credentials=lambda _tenant_id: args.api_key,
        ) as host,
    ):
        session = host.start_session(template, tenant_id="demo")
        host.subscribe(session, show)
        print(f"> {args.prompt}")
        try:
            answer = host.send(session, args.prompt)
        except openai.APIError as exc:  # the SDK's own error class, in worker mode too
            server = args.base_url or "OpenAI"
            print(f"\nthe model at {server} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print()
        (info,) = host.list_sessions()
        usage = info.usage
        print(f"answer: {answer.content}")
        print(
            f"usage: {usage.input_tokens} input ({usage.cached_input_tokens} cached), "
            f"{usage.output_tokens} output ({usage.reasoning_tokens} reasoning)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
