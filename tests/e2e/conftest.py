"""The e2e modules' administrator registry: Debian's docker-registry on loopback, TLS, a password (issue 39 item 1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from metax_dev import registry as test_registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[test_registry.Registry]:
    with test_registry.started(tmp_path_factory.mktemp("registry")) as r:
        yield r
