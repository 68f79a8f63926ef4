"""The keys commands (click's CliRunner, ``--json`` parsed), the OpenAPI copy, and
``--workers 1`` mode through the served app."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
from pathlib import Path

from click.testing import CliRunner

from cli import main
from cli._serve import configure_logging
from gateway import KeyStore, create_app, load_templates, openapi_document
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import TEMPLATES, run_server, stop_server

ROOT = Path(__file__).resolve().parents[2]


def test_keys_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(main, ["keys", "create", "--data-dir", str(tmp_path), "--tenant", "t1"])
    assert made.exit_code == 0, made.output
    key = made.stdout.strip()
    assert key.startswith("sv_")
    as_json = runner.invoke(
        main, ["keys", "create", "--data-dir", str(tmp_path), "--tenant", "t2", "--json"]
    )
    second = json.loads(as_json.stdout)
    assert second["tenant_id"] == "t2"
    listed = json.loads(
        runner.invoke(main, ["keys", "list", "--data-dir", str(tmp_path), "--json"]).stdout
    )
    assert [r["tenant_id"] for r in listed] == ["t1", "t2"]
    assert key not in json.dumps(listed)
    revoked = runner.invoke(
        main, ["keys", "revoke", "--data-dir", str(tmp_path), second["key_id"], "--json"]
    )
    assert json.loads(revoked.stdout)["revoked_at"] is not None
    missing = runner.invoke(main, ["keys", "revoke", "--data-dir", str(tmp_path), "key_nope"])
    assert missing.exit_code == 1
    assert "no API key with id 'key_nope'" in missing.output
    # the secret is private, and a new store (a restarted server) still knows the key
    assert stat.S_IMODE(os.stat(tmp_path / "gateway.secret").st_mode) == 0o600
    store = KeyStore(tmp_path)
    try:
        found = store.authenticate(key)
        assert found is not None
        assert found.tenant_id == "t1"
        assert store.authenticate(second["key"]) is None
    finally:
        store.close()
    table = runner.invoke(main, ["keys", "list", "--data-dir", str(tmp_path)])
    assert "revoked" in table.stdout


def test_the_openapi_copy_matches_the_served_document() -> None:
    kept = json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    assert kept == openapi_document(), (
        "docs/openapi.json is stale; regenerate it with python -c "
        '"import json,gateway; print(json.dumps(gateway.openapi_document(), indent=2, '
        'sort_keys=True))" > docs/openapi.json'
    )


def test_worker_mode(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path, workers=1, call_timeout=20)
    app = create_app(AsyncAgentHost(host), load_templates(TEMPLATES), keys)
    url, server, thread = run_server(app)
    try:
        import httpx  # noqa: PLC0415

        key = keys.create("acme").key
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
            assert c.get(url + "/openapi.json").json() == openapi_document()
            c.post("/v1/sessions", json={"template": "streaming", "session_id": "w"})
            r = c.post("/v1/sessions/w/messages", json={"text": "hi"}, timeout=20)
            assert r.json()["message"]["content"] == "echo: hi"
            assert c.get("/readyz").json() == {"ready": True}
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()


def test_serve_refuses_a_template_that_does_not_load(tmp_path: Path) -> None:
    runner = CliRunner()
    for spec, message in [
        ("x=tests.gateway.agents:nothing", "has no attribute 'nothing'"),
        ("x=no_such_module_here:t", "cannot import 'no_such_module_here'"),
        ("x=tests.gateway.agents:StreamingEcho", "not an actors.AgentTemplate"),
        ("bad", "must have the form pkg.module:attr"),
    ]:
        result = runner.invoke(main, ["serve", "--data-dir", str(tmp_path), "--template", spec])
        assert result.exit_code == 2, result.output
        assert message in result.output


def test_serve_logs_one_json_object_per_line() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    try:
        configure_logging("json", "info", stream)
        logging.getLogger("supervisor.host").warning(
            "session %r crashed", "s1", extra={"session_id": "s1", "reason": "killed"}
        )
    finally:
        root.handlers[:] = before[1]
        root.setLevel(before[0])
    (line,) = stream.getvalue().splitlines()
    parsed = json.loads(line)
    assert parsed["session_id"] == "s1"
    assert parsed["reason"] == "killed"
    assert parsed["level"] == "WARNING"
    assert parsed["logger"] == "supervisor.host"
