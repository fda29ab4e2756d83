"""Fixtures for the fake host's fault-injection tests: a small fake GPU server, audited after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeHost]:
    host = (
        builder.FakeHostBuilder()
        .gpus(4)
        .firmware_image("1.14.0.0")
        .vfio()
        .nics(builder.NicSpec("ens1", switch=0))
        .build(tmp_path / "host", timeout=2.0)
    )
    yield host
    assert host.audit() == []
