"""This build's release: one version for the chart, the images, the operator and its CRD (R-UPGRADE).

Why a module of its own: the version is written once, in pyproject.toml; the chart's ``version``/``appVersion``
are generated from it (tests/dev/test_chart_generated.py), the images are tagged with it
(`metax_dev.images.build.version`), and every process reads it from the installed distribution here: the operator
(its image tags, ``status.versions``, the CRD's release annotation), the agents' and the CLI's ``--version``, the
exporter's build-info series. Reading the installed distribution's metadata is the one I/O here, and it cannot
fail in a built image or a checkout installed with ``pip install -e``.
"""

from __future__ import annotations

import functools
from importlib import metadata

from metax_core.wire import meta

UNKNOWN = "0.0.0+unknown"
"""What a process reports when it runs from a tree that was never installed (no distribution metadata)."""


@functools.cache
def running() -> str:
    """The release of the code running in this process (read once: the installed distribution does not change under
    a running process, and render settings, --version and every status write ask for it)."""
    try:
        return metadata.version(meta.PRODUCT)
    except metadata.PackageNotFoundError:
        return UNKNOWN
