"""``record``: the class decorator of the internal immutable records a turn makes (its
mark, its checkpoint's cut, its queued save, the rows it plans).

To the type checker it is ``@dataclass(frozen=True, slots=True)``: assigning a field of
a record is an error there (``make lint``), as nothing ever changes one. At run time it
is ``@dataclass(slots=True)``: a frozen dataclass sets each field through
``object.__setattr__``, so building one of seven fields cost 1.7 us instead of 0.35,
and a turn builds about ten of them on its way to the store.

For internal classes only: a public frozen class (``Message``, ``CheckpointInfo``)
refuses changes, and hashes, at run time for its users. A record with ``eq`` (the
default) is unhashable at run time, as a mutable dataclass is; none is hashed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, dataclass_transform, overload

__all__ = ["record"]

_T = TypeVar("_T")


@overload
def record(cls: type[_T], /) -> type[_T]: ...
@overload
def record(*, eq: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True)
def record(
    cls: type[_T] | None = None, /, *, eq: bool = True
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """``@record`` or ``@record(eq=False)``: see the module docstring."""

    def make(target: type[_T]) -> type[_T]:
        return dataclass(slots=True, eq=eq)(target)

    return make if cls is None else make(cls)
