"""The release every test that installs from a registry shares (issue 39): the images of every platform laid out
as OCI indexes, the chart pinned to them, SBOMs and sums (`metax_dev.release.publish.make`), made once per session
(the images come from the build cache; the layout takes ~30 s per platform)."""

from __future__ import annotations

import pytest

from metax_dev.release import publish


@pytest.fixture(scope="session")
def made_release(tmp_path_factory: pytest.TempPathFactory) -> publish.Release:
    return publish.make(tmp_path_factory.mktemp("release") / "out", publish.PLATFORMS)
