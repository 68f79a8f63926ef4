"""The gateway benchmark's raw HTTP/1.1 client (``benchmarks/_http_client.py``) against a
real server: it must read exactly what the server answers, so a broken client
cannot make the gateway look fast."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from benchmarks._http_client import Connection, HttpError
from tests.gateway.conftest import Served


def test_the_bench_client_reads_json_chunked_and_error_answers(served: Served) -> None:
    key = served.keys.create("acme").key
    port = urlsplit(served.url).port
    assert port is not None

    async def scenario() -> None:
        async with Connection("127.0.0.1", port, key) as conn:
            made = await conn.json(
                "POST", "/v1/sessions", {"template": "echo", "session_id": "s"}, 201
            )
            assert made["session_id"] == "s"
            for text in ("one", "two"):  # one keep-alive connection, request after request
                answer = await conn.json("POST", "/v1/sessions/s/messages", {"text": text})
                assert answer == {"message": {"role": "assistant", "content": f"echo: {text}"}}
            status, body = await conn.request(
                "POST", "/v1/sessions/s/messages", {"text": "three", "stream": True}
            )  # chunked
            assert status == 200
            assert body.endswith(
                b'event: answer\ndata: {"message":{"role":"assistant","content":"echo: three"}}\n\n'
            )
            with pytest.raises(HttpError, match="404"):
                await conn.json("GET", "/v1/sessions/nope")
            history = await conn.json("GET", "/v1/sessions/s/history")
            assert len(history["messages"]) == 6

    asyncio.run(scenario())
