"""A checkpoint row's seal (``_message_log.seal``) is a stored format: rows written by any
earlier version must still verify. These values were computed by the code that first
wrote them (``msgpack.packb`` of the covered reference, then BLAKE2b-128), so a change
to how the seal is computed (a reused packer, say) that alters a single byte fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from supervisor._message_log import seal, verify

_DIGEST = bytes(range(32))
_BODY = b"body-bytes"


@pytest.mark.parametrize(
    ("ref", "parts", "checked", "expected"),
    [
        ((0, 120, 4, _DIGEST), None, False, "01b3105b774288912168873b2c24fea319"),
        (
            (2, 2**40, 9, _DIGEST),
            bytes(range(40)),
            True,
            "02c9416c536b404cbdbc6c21f6e7e53d0e",
        ),
        ((None, None, None, None), None, False, "011307c86e284c33d01de0206322d00d60"),
    ],
)
def test_the_seal_of_a_row_is_the_one_earlier_versions_wrote(
    ref: tuple[Any, ...], parts: bytes | None, checked: bool, expected: str
) -> None:
    assert seal(_BODY, ref, parts, checked=checked).hex() == expected
    assert verify(bytes.fromhex(expected), _BODY, ref, parts) is checked
