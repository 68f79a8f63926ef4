"""``sessionvisor serve`` refusing to start: one ``error:`` line (or a usage error)
for each reason, never a traceback. Nothing here gets as far as listening."""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli import main
from supervisor import AgentHost
from tests.cli.test_damage import damaged_store

TEMPLATE = "chat=tests.cli.serve_targets:echo"


@pytest.fixture
def process_state() -> Iterator[None]:
    """What ``serve`` tunes in its process before it starts the host (the root logger,
    the switch interval, the collector's thresholds and frozen objects), put back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def serve(data_dir: Path, template: str = TEMPLATE) -> Result:
    args = ["serve", "--data-dir", str(data_dir), "--template", template, "--port", "0"]
    return CliRunner().invoke(main, args)


def error_line(result: Result) -> str:
    """The one line ``serve`` ends with on stderr (after any log lines), checked to
    come without a traceback."""
    assert "Traceback" not in result.stderr
    return result.stderr.splitlines()[-1]


def test_a_tool_or_a_function_needing_arguments_is_not_a_template(tmp_path: Path) -> None:
    for target, message in [
        ("tests.cli.serve_targets:add", "is an actors.Tool, not an actors.AgentTemplate"),
        ("tests.cli.serve_targets:needs_model", "is a function that needs arguments, not an"),
    ]:
        result = serve(tmp_path, f"chat={target}")
        assert result.exit_code == 2, result.output
        assert f"Error: template {target!r} {message}" in result.stderr
        assert "(or a function of no arguments returning one)" in result.stderr
    assert not any(tmp_path.iterdir())


def test_a_failing_factory_is_one_line(tmp_path: Path) -> None:
    result = serve(tmp_path, "chat=tests.cli.serve_targets:broken")
    assert result.exit_code == 1
    assert error_line(result) == (
        "error: template 'tests.cli.serve_targets:broken': the factory raised RuntimeError: "
        "the model's credentials are missing; call it in Python to see where"
    )


def test_a_data_dir_in_use(tmp_path: Path, process_state: None) -> None:
    host = AgentHost(data_dir=tmp_path)
    try:
        fds = set(os.listdir("/proc/self/fd"))
        result = serve(tmp_path)
        assert set(os.listdir("/proc/self/fd")) <= fds  # the key store it opened is closed
    finally:
        host.shutdown()
    assert result.exit_code == 1
    assert error_line(result).startswith(
        f"error: data directory {str(tmp_path)!r} is in use by another AgentHost of this "
        "same process"
    )


def test_a_fingerprint_key_others_may_read(tmp_path: Path, process_state: None) -> None:
    AgentHost(data_dir=tmp_path).shutdown()
    key = tmp_path / "fingerprint.key"
    os.chmod(key, 0o644)
    result = serve(tmp_path)
    assert result.exit_code == 1
    assert error_line(result) == (
        f"error: {key} may be read by other users (mode 644); it keys the API-key "
        f"fingerprints: run 'chmod 600 {key}'"
    )


def test_a_damaged_store(tmp_path: Path, process_state: None) -> None:
    damaged_store(tmp_path)
    result = serve(tmp_path)
    assert result.exit_code == 1
    assert error_line(result) == (
        f"error: a database in {str(tmp_path)!r} is damaged (database disk image is "
        f"malformed): run 'sessionvisor doctor --data-dir {tmp_path}' to see what is wrong, "
        "then stop the host and restore the file (and its -wal file) from a backup"
    )


def test_a_missing_parent_is_a_typo(tmp_path: Path) -> None:
    typo = tmp_path / "nope" / "data"
    result = serve(typo)
    assert result.exit_code == 1
    assert f"no directory {str(tmp_path / 'nope')!r} to create it in" in result.stderr
    assert not (tmp_path / "nope").exists()
