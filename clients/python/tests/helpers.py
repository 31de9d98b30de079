"""Small helpers the typed tests share."""

from __future__ import annotations

from typing import Optional, TypeVar

T = TypeVar("T")


def must(value: Optional[T]) -> T:
    """``value``, which the test expects to be there (a fence of a held lock, LOCK.INFO of a
    held key)."""
    assert value is not None
    return value
