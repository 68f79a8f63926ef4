"""An error no handler knows (a bug, a key store's database driver failing in a way the
gateway does not map) answers problem details too, and the connection stays usable."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway import KeyStore, Limits, load_templates
from gateway.keys import RememberedSession
from supervisor import AgentHost
from tests.gateway.conftest import TEMPLATES, serving


class BrokenRows(KeyStore):
    """A ``KeyStore`` whose session records cannot be read once ``broken`` is set."""

    broken = False

    def session_row(self, session_id: str) -> RememberedSession | None:
        if self.broken:
            raise RuntimeError("the driver fell over")
        return super().session_row(session_id)


def test_an_unexpected_error_answers_a_problem_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    keys = BrokenRows(tmp_path)
    with serving(host, load_templates(TEMPLATES), tmp_path, Limits(), keys) as served:
        with served.client(keys.create("acme").key) as client:
            created = client.post("/v1/sessions", json={"template": "echo", "session_id": "s1"})
            assert created.status_code == 201, created.text
            keys.broken = True
            with caplog.at_level(logging.ERROR, logger="gateway"):
                got = client.get("/v1/sessions/s1")
            keys.broken = False

            assert got.status_code == 500
            assert got.headers["content-type"] == "application/problem+json"
            assert got.json()["type"].endswith("/problems/internal")
            assert "driver" not in got.text  # the server's own words stay in its log
            assert any("the driver fell over" in r.exc_text for r in caplog.records if r.exc_text)
            assert client.get("/v1/sessions/s1").status_code == 200  # and it goes on serving
