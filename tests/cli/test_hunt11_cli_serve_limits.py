"""Hunt 11: ``sessionvisor serve`` takes the gateway's limits as options (``--max-body-bytes``,
``--max-message-chars``, ``--max-sessions-per-tenant``, ``--max-concurrent-per-key``),
validated and shown in ``--help``, and the server it starts applies them; before, only
the built-in defaults could be served."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from cli import main
from cli._serve import LIMIT_DEFAULTS
from gateway.limits import Limits
from tests.gateway.serve_process import ServeProcess, create_key

TEMPLATES = ["echo=tests.gateway.agents:echo"]


def test_the_options_default_to_the_gateways_limits_and_are_in_help() -> None:
    defaults = dataclasses.asdict(Limits())
    assert {name: defaults[name] for name in LIMIT_DEFAULTS} == LIMIT_DEFAULTS
    shown = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    for name, value in LIMIT_DEFAULTS.items():
        assert f"--max-{name.removeprefix('max_').replace('_', '-')} INTEGER RANGE" in text
        assert f"[default: {value}; x>=1]" in text


@pytest.mark.parametrize(
    "option", ["--max-body-bytes", "--max-message-chars", "--max-sessions-per-tenant",
               "--max-concurrent-per-key"],
)  # fmt: skip
def test_a_limit_below_one_is_a_usage_error(tmp_path: Path, option: str) -> None:
    done = CliRunner().invoke(
        main, ["serve", "--data-dir", str(tmp_path), "--template", TEMPLATES[0], option, "0"]
    )
    assert done.exit_code == 2
    assert f"Invalid value for '{option}': 0 is not in the range x>=1." in done.output
    assert list(tmp_path.iterdir()) == []  # refused before anything is made


def test_the_served_gateway_applies_the_limits_given(tmp_path: Path) -> None:
    data = tmp_path / "data"
    key = create_key(data, "acme")
    options = ["--max-body-bytes", "300", "--max-message-chars", "5",
               "--max-sessions-per-tenant", "1", "--max-concurrent-per-key", "1"]  # fmt: skip
    server = ServeProcess(data, TEMPLATES, tmp_path / "serve.log", options=options)
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            made = client.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
            assert made.status_code == 201, made.text
            second = client.post("/v1/sessions", json={"template": "echo", "session_id": "t"})
            assert second.status_code == 409, second.text
            assert second.json()["type"] == "/problems/session-limit"

            long = client.post("/v1/sessions/s/messages", json={"text": "sixsix"})
            assert long.status_code == 422, long.text
            assert long.json()["detail"] == "the text has 6 characters; at most 5 are allowed"
            assert client.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success

            big = client.post("/v1/sessions/s/messages", json={"text": "x" * 400})
            assert big.status_code == 413, big.text
            assert big.json()["detail"] == "at most 300 bytes"

            with client.stream("GET", "/v1/sessions/s/events") as events:  # holds the one slot
                assert events.status_code == 200
                busy = client.get("/v1/sessions/s")
                assert busy.status_code == 429, busy.text
                assert busy.json()["detail"] == "at most 1 requests per key at once"
    finally:
        server.signal(signal.SIGTERM)
        assert server.wait(60) == 0
