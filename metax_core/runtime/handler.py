"""The names both sides of the runtime seam use (C4, R-MACA): the container-runtime agent writes them into the
node's runtime configuration and installs the wrapper; the container-edit service listens where the wrapper
calls. One definition each; the agents, the wrapper's build and the tests import them from here."""

from __future__ import annotations

from typing import Final

RUNTIME_HANDLER: Final = "metax"
"""The runtime handler name in the runtime's configuration, and the RuntimeClass ``handler`` that selects it."""

WRAPPER_NAME: Final = "metax-container-runtime"
"""The OCI runtime wrapper's file name (it edits a container's spec through the edit service, then runs runc)."""

WRAPPER_IMAGE_PATH: Final = f"/opt/metax/libexec/{WRAPPER_NAME}"
"""Where the wrapper is inside the product image, from where the container-runtime agent installs it."""

TOOLKIT_HOST_DIR: Final = "/var/lib/metax/toolkit"
"""The host directory the container-runtime agent owns for what the runtime executes (the wrapper)."""

WRAPPER_HOST_PATH: Final = f"{TOOLKIT_HOST_DIR}/{WRAPPER_NAME}"
"""Where the node's runtime finds the wrapper (a host path: the runtime runs outside every container)."""

EDIT_SOCKET_HOST_PATH: Final = "/run/metax/container-edit.sock"
"""The unix socket the wrapper sends a container's spec to, and the edit service answers on (a host path)."""
