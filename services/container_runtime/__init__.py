"""container-runtime (C4): configures the node's container runtime with the ``metax`` runtime handler.

`agent` detects the runtime, installs the wrapper, asks `metax_core.runtime` for the drop-in and the root
edit, writes them through the recorded transaction (`files`), validates with the host's own binary,
restarts through the service manager only when the running daemon lacks the handler, and publishes
``container-runtime`` readiness once the running daemon reports the handler (docs/container-runtime.md).
"""
