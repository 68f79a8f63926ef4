"""Loading a template in a worker holds up no other session of that worker.

A worker imports the modules of a template it is sent (cloudpickle loads them by
name), and an import may take long: a large library, a model file read at import.
The worker read the ``load_template`` frame and ran that import on the thread that
reads its pipe (its main thread, or an idle session reading for itself), so until
the import was done no frame was read: every call for every other session of the
worker waited for it. The load now runs as a start does, beside the reading.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from actors import AgentTemplate, EchoModel
from supervisor import AgentHost, MemoryCheckpointStore, WorkerCrashed
from tests.supervisor.host_helpers import WAIT, poll_until

MODULE = "hunt5_slow_import_plugin"


def add_to_path(path: str) -> None:
    """A worker initializer: ``path`` joins the worker's ``sys.path``."""
    sys.path.insert(0, path)


@pytest.fixture
def slow_module(tmp_path: Path) -> Iterator[ModuleType]:
    """A plugin module whose import, in a worker, writes ``loading`` beside it and then
    waits (30 s at most) for a file ``go`` there; imported at once here."""
    (tmp_path / f"{MODULE}.py").write_text(
        textwrap.dedent(
            """
            import multiprocessing
            import pathlib
            import threading
            import time

            from actors import Plugin

            class SlowToImport(Plugin):
                name = "slow-to-import"

            if multiprocessing.parent_process() is not None:  # in a worker
                _here = pathlib.Path(__file__).parent
                (_here / "loading").touch()
                _deadline = time.monotonic() + 30
                while not (_here / "go").exists() and time.monotonic() < _deadline:
                    threading.Event().wait(0.01)
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(MODULE)
    finally:
        (tmp_path / "go").touch()  # a worker still importing it goes on
        sys.path.remove(str(tmp_path))
        sys.modules.pop(MODULE, None)


def test_a_slow_template_import_holds_up_no_other_session(
    slow_module: ModuleType, tmp_path: Path
) -> None:
    with AgentHost(
        MemoryCheckpointStore(),
        workers=1,
        worker_initializer=add_to_path,
        worker_initargs=(str(tmp_path),),
    ) as host:
        busy = host.start_session(AgentTemplate(model=EchoModel()), "busy")
        slow = AgentTemplate(model=EchoModel(), plugins=[slow_module.SlowToImport()])
        started: list[str] = []
        starting = threading.Thread(target=lambda: started.append(host.start_session(slow, "s")))
        starting.start()
        try:
            assert poll_until((tmp_path / "loading").exists)
            # The worker is importing the module now: its other session still answers.
            assert host.send(busy, "hi", timeout=WAIT).content == "echo: hi"
            assert host.history(busy)[-1].content == "echo: hi"
        finally:
            (tmp_path / "go").touch()
            starting.join(WAIT)
        assert started == ["s"]
        assert host.send("s", "and me").content == "echo: and me"
        assert host.worker_deaths == 0


def test_a_template_import_past_the_worker_call_timeout_kills_its_own_worker_only(
    slow_module: ModuleType, tmp_path: Path
) -> None:
    with AgentHost(
        MemoryCheckpointStore(),
        workers=2,
        worker_call_timeout=1.0,
        worker_initializer=add_to_path,
        worker_initargs=(str(tmp_path),),
    ) as host:
        others = [host.start_session(AgentTemplate(model=EchoModel()), f"o{i}") for i in range(2)]
        slow = AgentTemplate(model=EchoModel(), plugins=[slow_module.SlowToImport()])
        with pytest.raises(WorkerCrashed, match="signal SIGKILL"):
            host.start_session(slow, "s")
        assert host.wait_for_workers(WAIT)  # its worker is replaced
        assert host.worker_deaths == 1  # before: 3, the start tried two more workers
        for other in others:  # resumed if they were on the killed worker
            assert host.send(other, "hi", timeout=WAIT).content == "echo: hi"
