"""The test control plane's own errors.

Why this module exists: every part of the launcher (the Go build, the PKI, the child processes,
the cluster) fails with the same exception, so callers such as the pytest fixtures catch one
type and report its message, which carries the reason and, where there is one, a log tail.
"""

from __future__ import annotations


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or driven."""


class GoNotFoundError(ControlPlaneError):
    """No Go toolchain: the binaries cannot be built."""
