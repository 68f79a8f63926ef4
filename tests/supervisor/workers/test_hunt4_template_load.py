"""A template the host can pickle but a worker cannot load: the error says where and why.

A worker imports by name the module of each class and function a template uses
(cloudpickle sends only the main file's by value). A module the host imported
from a ``sys.path`` entry it added after its workers started is not importable
there. Before, ``start_session`` raised a bare ``ModuleNotFoundError: No module
named 'x'`` for a module the caller had imported fine, with nothing saying that a
worker process failed to load the template.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import AgentTemplate, EchoModel
from supervisor import AgentHost, MemoryCheckpointStore, TemplateNotLoadable
from tests.supervisor.workers.worker_tools import WAIT

MODULE = "hunt4_host_only_plugin"


@pytest.fixture
def host() -> Iterator[AgentHost]:
    host = AgentHost(MemoryCheckpointStore(), workers=1)
    yield host
    host.shutdown()


@pytest.fixture
def host_only_module(host: AgentHost, tmp_path: Path) -> Iterator[object]:
    """A plugin module importable in this process only: its directory joins ``sys.path``
    after the workers' forkserver took its copy of it (when ``host`` started)."""
    (tmp_path / f"{MODULE}.py").write_text(
        textwrap.dedent(
            """
            from actors import Plugin

            class HostOnly(Plugin):
                name = "host-only"
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(MODULE)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(MODULE, None)


def test_a_template_no_worker_can_load_fails_with_the_reason_and_the_fix(
    host: AgentHost, host_only_module: object
) -> None:
    plugin = host_only_module.HostOnly()  # type: ignore[attr-defined]
    template = AgentTemplate(model=EchoModel(), plugins=[plugin])
    with pytest.raises(TemplateNotLoadable) as caught:  # typed; the import error its cause
        host.start_session(template, "s")
    shown = "".join(traceback.format_exception(caught.value))
    assert "could not load the agent template" in shown
    assert "PYTHONPATH" in shown
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)

    assert host.worker_deaths == 0
    assert host.wait_for_workers(WAIT)
    plain = host.start_session(AgentTemplate(model=EchoModel()), "plain")
    assert host.send(plain, "hi").content == "echo: hi"
