"""The ``harness`` fixture: an operator on a fresh in-memory cluster (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import Harness


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    try:
        yield h
    finally:
        h.stop()
