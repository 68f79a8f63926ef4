"""Hunt 10: ``NodeConfig``'s validation errors name the field they refuse (``field``),
their message unchanged; ``sessionvisor serve --postgres`` points at the option that
sets that field by it, not by the message's first word."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli import _serve, main
from supervisor.cluster import NodeConfig

NOT_IMPORTED = "chat=tests.cli.no_such_module_hunt10:echo"


def _serve_with(data_dir: Path, *extra: str) -> Result:
    args = [
        "serve", "--data-dir", str(data_dir), "--template", NOT_IMPORTED, "--port", "0",
        "--postgres", "postgresql://127.0.0.1:1/nowhere", *extra,
    ]  # fmt: skip
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize(
    ("options", "field", "message", "kind"),
    [
        ({"node_id": ""}, "node_id", "node_id must be a non-empty str", ValueError),
        ({"node_id": "a b"}, "node_id", "node_id must be 1 to 255 printable", ValueError),
        ({"address": 5}, "address", "address must be a str, got int", TypeError),
        ({"address": "http://a\x00"}, "address", "address must not hold a NUL", ValueError),
        ({"ttl": 0}, "ttl", "ttl must be a positive number", ValueError),
        ({"ttl": 1e9}, "ttl", "ttl must be between 0.1 and 86400", ValueError),
        ({"margin": 20.0}, "margin", "margin must be > 0 and < ttl", ValueError),
        ({"margin": 7.0}, "margin", "margin must be < 2/3 of ttl", ValueError),
        ({"sweep_interval": -1}, "sweep_interval", "sweep_interval must be > 0", ValueError),
        ({"sweep_batch": 0}, "sweep_batch", "sweep_batch must be an int >= 1", ValueError),
        ({"events": "kafka://x"}, "events", "events must be 'postgres'", ValueError),
        ({"template": 3}, "template", "template must be an AgentTemplate", TypeError),
    ],
)
def test_each_refused_field_is_named_and_the_message_kept(
    options: dict[str, Any], field: str, message: str, kind: type[Exception]
) -> None:
    with pytest.raises(kind) as caught:
        NodeConfig(**{"node_id": "n", **options})
    assert str(caught.value).startswith(message)
    assert getattr(caught.value, "field", None) == field
    copy = pickle.loads(pickle.dumps(caught.value))  # a worker's error reaches the parent
    assert (type(copy), str(copy), copy.field) == (type(caught.value), str(caught.value), field)


def test_serve_names_the_option_of_the_field_not_of_the_first_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message that does not start with its field's name (any rewording of one)
    still points at the option that sets the field."""

    def refusing(**options: Any) -> NodeConfig:
        with pytest.raises(ValueError) as caught:
            NodeConfig(**{**options, "ttl": 0})
        error = caught.value
        error.args = (f"the heartbeat period is wrong: {error}",)
        raise error

    monkeypatch.setattr(_serve, "NodeConfig", refusing)
    data_dir = tmp_path / "data"
    result = _serve_with(data_dir, "--node-id", "n1")
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--ttl': the heartbeat period is wrong" in result.stderr
    assert not data_dir.exists()


def test_an_advertised_address_that_is_no_url_names_advertise(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = _serve_with(data_dir, "--node-id", "n1", "--advertise", "10.0.0.5:8080")
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--advertise': advertise must be the gateway's URL" in (result.stderr)
    assert "no_such_module_hunt10" not in result.stderr
    assert not data_dir.exists()
