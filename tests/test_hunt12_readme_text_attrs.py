"""README, "Arguments are checked at the call" and "A session can always checkpoint":
a session's text attributes (``tenant_id``, ``api_key``, ...) that no checkpoint can
hold are refused at the call with a ``ValueError`` naming the argument, as a
``session_id`` or a user text with a lone surrogate is; the ``sessionvisor``
command turns such a value into a usage error (exit 2), never a traceback.

Before: ``start_session(tenant_id="ac\\udcffme")`` got as far as the first
checkpoint and raised ``SnapshotEncodeError`` (a ``TypeError``) about
``metadata.tenant_id``; ``api_key="\\udcff"`` raised a bare ``UnicodeEncodeError``
from the fingerprint's HMAC naming nothing; and ``sessionvisor keys create --tenant``
given a name with bytes that are not UTF-8 (a lone surrogate in ``sys.argv``)
ended in a traceback from the key store's INSERT.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from actors import AgentTemplate
from cli import main
from supervisor import AgentHost, MemoryCheckpointStore, check_tenant_id

TEMPLATE = AgentTemplate(model="echo")
UNDECODABLE = "ac\udcffme"  # what Python makes of the argument b"ac\xffme"


@pytest.mark.parametrize("attribute", ["tenant_id", "api_key", "model", "group_id"])
def test_a_text_attribute_no_checkpoint_can_hold_is_refused_at_the_call(attribute: str) -> None:
    with AgentHost(store=MemoryCheckpointStore()) as host:
        with pytest.raises(ValueError, match=attribute):
            host.start_session(TEMPLATE, "s1", **{attribute: UNDECODABLE})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=attribute):
            host.futures.start_session(TEMPLATE, "s1", **{attribute: UNDECODABLE})  # type: ignore[arg-type]
        assert host.list_sessions() == []


def test_check_tenant_id_refuses_a_lone_surrogate() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        check_tenant_id(UNDECODABLE)


def test_keys_create_with_an_undecodable_tenant_is_a_usage_error(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = CliRunner().invoke(
        main, ["keys", "create", "--data-dir", str(data_dir), "--tenant", UNDECODABLE]
    )
    assert result.exit_code == 2, result.output
    assert "--tenant" in result.output
    assert not isinstance(result.exception, UnicodeError)
