"""A template the host can pickle but a worker cannot load raises ``TemplateNotLoadable``.

A worker imports by name the module of each class and function a template uses
(cloudpickle sends only the main file's by value). When that import fails there
(the module is not on the worker's ``sys.path``, or its import raises in the
worker, even with ``sys.exit``), the caller gets one typed error naming the
template, the worker and the underlying error, with the fix; the original is
its ``__cause__``. Before, the caller got the original class (a
``ModuleNotFoundError`` for a module it had imported fine), and a module
calling ``sys.exit`` on import killed the worker, and then the next two.
"""

from __future__ import annotations

import importlib
import multiprocessing
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from actors import AgentTemplate, EchoModel, Plugin
from gateway.problems import problem_for
from supervisor import (
    AgentHost,
    MemoryCheckpointStore,
    RemoteError,
    SupervisorError,
    TemplateNotLoadable,
    TemplateNotPicklable,
)
from tests.supervisor.host_helpers import WAIT

_made = iter(range(10**6))


def add_to_path(path: str) -> None:
    """A worker initializer: ``path`` joins the worker's ``sys.path``."""
    sys.path.insert(0, path)


def _workers() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name == "sessionvisor-worker"]


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[Callable[[str], ModuleType]]:
    """Write a module with the given body into ``tmp_path`` and import it here; the
    directory joins this process's ``sys.path`` then (after the workers' server took
    its copy of it, if a host was made before), until the test ends."""
    names: list[str] = []

    def write(body: str) -> ModuleType:
        if str(tmp_path) not in sys.path:
            sys.path.insert(0, str(tmp_path))
        name = f"hunt5_template_module_{next(_made)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
        names.append(name)
        return importlib.import_module(name)

    try:
        yield write
    finally:
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))
        for name in names:
            sys.modules.pop(name, None)


_PLUGIN = """
    from actors import Plugin

    class ParentOnly(Plugin):
        name = "parent-only"
"""


def _template(module: ModuleType) -> AgentTemplate:
    plugin: Plugin = module.ParentOnly()
    return AgentTemplate(model=EchoModel(), plugins=[plugin])


def _assert_host_unharmed(host: AgentHost, pids: set[int]) -> None:
    """No worker died or was replaced, and sessions still start and answer."""
    assert host.worker_deaths == 0
    assert host.wait_for_workers(WAIT)
    assert {w.pid for w in host.workers()} == pids
    plain = host.start_session(AgentTemplate(model=EchoModel()), f"plain-{next(_made)}")
    assert host.send(plain, "hi").content == "echo: hi"


def test_a_module_the_workers_cannot_import(modules: Callable[[str], ModuleType]) -> None:
    before = _workers()
    with AgentHost(MemoryCheckpointStore(), workers=2) as host:
        pids = {w.pid for w in host.workers()}
        other = host.start_session(AgentTemplate(model=EchoModel()), "other")
        module = modules(_PLUGIN)  # on sys.path only after the workers started
        with pytest.raises(TemplateNotLoadable) as caught:
            host.start_session(_template(module), "s")
        error = caught.value
        assert isinstance(error, SupervisorError)
        assert isinstance(error, ImportError)  # what the worker's own error usually was
        assert error.pid in pids
        text = str(error)
        assert f"worker process pid {error.pid} could not load the agent template" in text
        assert f"plugins: parent-only ({module.__name__}.ParentOnly)" in text
        assert "model: actors.EchoModel" in text
        assert f"ModuleNotFoundError: No module named '{module.__name__}'" in text
        assert "PYTHONPATH" in text
        assert "workers=None" in text
        assert error.problem == f"ModuleNotFoundError: No module named '{module.__name__}'"
        assert isinstance(error.__cause__, ModuleNotFoundError)
        assert error.error is error.__cause__
        assert [i.session_id for i in host.list_sessions()] == ["other"]
        assert host.send(other, "still here").content == "echo: still here"
        _assert_host_unharmed(host, pids)
        with pytest.raises(TemplateNotLoadable):  # and again: nothing half-loaded is kept
            host.start_session(_template(module), "s")
        _assert_host_unharmed(host, pids)
    assert _workers() == before


def test_a_module_whose_import_raises_in_the_worker(
    modules: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    module = modules(
        _PLUGIN
        + """
    import multiprocessing

    def _made_here():
        class NoDevice(Exception):
            pass
        return NoDevice

    if multiprocessing.parent_process() is not None:  # in a worker
        raise _made_here()("the device is held by the main process")
    """
    )
    with AgentHost(
        MemoryCheckpointStore(),
        workers=1,
        worker_initializer=add_to_path,
        worker_initargs=(str(tmp_path),),
    ) as host:
        pids = {w.pid for w in host.workers()}
        with pytest.raises(TemplateNotLoadable) as caught:
            host.start_session(_template(module), "s")
        error = caught.value
        assert "the device is held by the main process" in str(error)
        # Its class cannot cross the pipe (defined in a function): its text does.
        assert isinstance(error.__cause__, RemoteError)
        assert error.__cause__.remote_message == "the device is held by the main process"
        assert "NoDevice" in error.problem
        _assert_host_unharmed(host, pids)


def test_a_module_that_exits_on_import_in_the_worker(
    modules: Callable[[str], ModuleType], tmp_path: Path
) -> None:
    """``sys.exit`` at import (an ``argparse`` error in a script's top level, say) fails
    the load like any error; before, it ended the worker, and the start killed two more
    trying again."""
    module = modules(
        _PLUGIN
        + """
    import multiprocessing
    import sys

    if multiprocessing.parent_process() is not None:
        sys.exit("usage: app.py --config FILE")
    """
    )
    with AgentHost(
        MemoryCheckpointStore(),
        workers=1,
        worker_initializer=add_to_path,
        worker_initargs=(str(tmp_path),),
    ) as host:
        pids = {w.pid for w in host.workers()}
        with pytest.raises(TemplateNotLoadable) as caught:
            host.start_session(_template(module), "s")
        assert "SystemExit: usage: app.py --config FILE" in str(caught.value)
        _assert_host_unharmed(host, pids)


def test_the_gateway_answers_it_as_the_operators_configuration_error() -> None:
    error = TemplateNotLoadable("model: actors.EchoModel", 4242, ModuleNotFoundError("No x"))
    problem = problem_for(error, "s")
    assert problem.status == 500
    assert problem.slug == "template-unusable"
    assert problem.retry_after is None  # sending again does not help: the server's setup
    assert "4242" not in problem.detail  # the server's internals stay in its log
    assert "No x" not in problem.detail


def test_the_gateway_answers_an_unpicklable_template_as_the_servers_error_too() -> None:
    error = TemplateNotPicklable("template.tools[0]", TypeError("cannot pickle '_thread.lock'"))
    problem = problem_for(error, "s")
    assert problem.status == 500  # was 422 "invalid input": the client sent nothing wrong
    assert problem.slug == "template-unusable"
    assert problem.retry_after is None
    assert "_thread.lock" not in problem.detail
