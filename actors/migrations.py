"""Snapshot schema versions and the registry of migrations between them.

A snapshot carries the ``schema_version`` it was written with. Reading an
older one upgrades its plain dict one version at a time through registered
steps (``v1 -> v2 -> v3``...), so every step stays small and is written once,
against the version right before it. Reading a newer one is refused: this
code cannot know what the newer fields mean.

The versions so far:

1. the first schema;
2. ``state.usage`` gains ``cached_input_tokens`` and ``reasoning_tokens``
   (step ``_usage_details``: both 0 in a snapshot written before them).

When the schema changes, bump ``SCHEMA_VERSION`` and register the step from the
previous version in this module. Tests build their own ``MigrationRegistry``
instead of touching the shared one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from actors.errors import SnapshotDecodeError

__all__ = ["SCHEMA_VERSION", "SNAPSHOT_MIGRATIONS", "Migration", "MigrationRegistry"]

SCHEMA_VERSION = 2
"""The snapshot schema version this code writes and fully understands."""

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""One upgrade step: takes the plain snapshot dict of version ``v``, returns version ``v + 1``.

It need not update ``schema_version``; the registry does that.
"""


class MigrationRegistry:
    """Upgrade steps from each older schema version to the next one.

    Thread-safe: registration takes a lock; ``upgrade`` reads an immutable
    view, so register steps at import time and read from any thread.

    Args:
        current_version: The version ``upgrade`` brings data to; snapshots of a
            higher version are refused. Tests pass their own.
    """

    def __init__(self, current_version: int = SCHEMA_VERSION) -> None:
        if isinstance(current_version, bool) or not isinstance(current_version, int):
            raise TypeError("current_version must be an int")
        if current_version < 1:
            raise ValueError(f"current_version must be >= 1, got {current_version}")
        self.current_version = current_version
        self._steps: dict[int, Migration] = {}
        self._lock = threading.Lock()

    def register(self, from_version: int) -> Callable[[Migration], Migration]:
        """Decorator registering ``fn`` as the step ``from_version -> from_version + 1``.

        Raises:
            ValueError: ``from_version`` is not below ``current_version``, or a step
                for it is already registered.
        """

        def decorate(fn: Migration) -> Migration:
            self.add(from_version, fn)
            return fn

        return decorate

    def add(self, from_version: int, fn: Migration) -> None:
        """Register ``fn`` as the step ``from_version -> from_version + 1`` (see ``register``)."""
        if not 1 <= from_version < self.current_version:
            raise ValueError(
                f"from_version must be in [1, {self.current_version - 1}], got {from_version}"
            )
        with self._lock:
            if from_version in self._steps:
                raise ValueError(f"a migration from version {from_version} is already registered")
            self._steps = {**self._steps, from_version: fn}

    def upgrade(self, data: dict[str, Any], found: int) -> dict[str, Any]:
        """Bring a plain snapshot dict of version ``found`` up to ``current_version``.

        Args:
            data: The decoded plain dict (not mutated if a step copies before writing).
            found: Its ``schema_version``.

        Returns:
            The upgraded dict, with ``schema_version`` set to ``current_version``.

        Raises:
            SnapshotDecodeError: the version is newer than supported, a step is
                missing, or a step raised or returned something that is not a dict.
        """
        if found > self.current_version:
            raise SnapshotDecodeError(
                f"schema_version {found} is newer than the supported version "
                f"{self.current_version}; upgrade sessionvisor to read it"
            )
        steps = self._steps
        version = found
        while version < self.current_version:
            step = steps.get(version)
            if step is None:
                raise SnapshotDecodeError(
                    f"no migration registered from schema_version {version} to {version + 1}"
                )
            try:
                upgraded = step(data)
            except Exception as exc:
                raise SnapshotDecodeError(
                    f"migration from schema_version {version} to {version + 1} failed: {exc!r}"
                ) from exc
            if not isinstance(upgraded, dict):
                raise SnapshotDecodeError(
                    f"migration from schema_version {version} returned "
                    f"{type(upgraded).__name__}, not a dict"
                )
            version += 1
            data = {**upgraded, "schema_version": version}
        return data


SNAPSHOT_MIGRATIONS = MigrationRegistry()
"""The registry ``Snapshot.deserialize`` uses by default, with every step of this module."""


@SNAPSHOT_MIGRATIONS.register(1)
def _usage_details(data: dict[str, Any]) -> dict[str, Any]:
    """1 -> 2: ``state.usage`` gains ``cached_input_tokens`` and ``reasoning_tokens``, 0 in
    a snapshot written before providers' usage details were kept. Copies what it changes;
    a state or usage that is not a dict is left for the reader to refuse."""
    state = data.get("state")
    if not isinstance(state, dict) or not isinstance(state.get("usage"), dict):
        return data
    usage = {"cached_input_tokens": 0, "reasoning_tokens": 0, **state["usage"]}
    return {**data, "state": {**state, "usage": usage}}


for _cls in (MigrationRegistry,):
    _cls.__module__ = "actors"
