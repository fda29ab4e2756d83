"""The real-node launcher's error.

Why this module exists: every step of bringing a real node up (mount namespace, containerd, images,
kubelet, registration) fails with one exception type that carries the reason and the tail of the
failing component's log, so the pytest fixture and the CLI report one message. It is a
``ControlPlaneError`` so code that starts "a test cluster" catches both with one clause.
"""

from __future__ import annotations

from metax_dev.controlplane import errors


class NodeError(errors.ControlPlaneError):
    """A real node could not be started, driven or cleaned up."""
