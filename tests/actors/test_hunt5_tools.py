"""Tool schemas a demanding user would write, found by a bug hunt:

* a parameter hinted with the bare ``collections.abc.Sequence`` or ``Mapping`` was refused,
  by an error that listed ``Sequence`` and ``Mapping`` among the hints to use;
* a ``float`` default of ``inf`` or ``nan`` went into the schema, which has no JSON
  spelling for it: every request carrying the tool was sent with ``Infinity`` in it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from actors import tool


def test_bare_abc_sequence_and_mapping_are_arrays_and_objects() -> None:
    @tool
    def tag(items: Sequence, labels: Mapping) -> str:  # type: ignore[type-arg]
        """Tag items."""
        return "ok"

    properties = tag.parameters["properties"]
    assert properties["items"] == {"type": "array"}
    assert properties["labels"] == {"type": "object"}


def test_a_default_with_no_json_spelling_is_left_out_of_the_schema() -> None:
    @tool
    def clamp(low: float = -math.inf, high: float = math.nan, step: float = 0.5) -> str:
        """Clamp."""
        return "ok"

    properties = clamp.parameters["properties"]
    assert "default" not in properties["low"]
    assert "default" not in properties["high"]
    assert properties["step"]["default"] == 0.5
    json.dumps(clamp.schema(), allow_nan=False)  # strict JSON, as providers read it
