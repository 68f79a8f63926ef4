"""``doctor`` checks a data directory without changing it: no file made, none changed,
so that two runs in a row report the same size."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from actors import AgentTemplate, EchoModel
from cli import main
from supervisor import AgentHost


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def contents(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_doctor_makes_no_file_in_a_directory_no_host_serves(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with AgentHost(data_dir=data) as host:
        host.start_session(AgentTemplate(model=EchoModel()), "s1", tenant_id="acme")
        host.send("s1", "hello")
    made = run("keys", "create", "--tenant", "acme", "--data-dir", str(data))
    assert made.exit_code == 0, made.output
    before = contents(data)

    first = run("doctor", "--json", "--data-dir", str(data))
    assert first.exit_code == 0, first.output
    assert contents(data) == before
    second = run("doctor", "--json", "--data-dir", str(data))
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["bytes"] == json.loads(first.stdout)["bytes"]
    assert json.loads(second.stdout)["sessions"] == 1
    assert contents(data) == before
