"""container-edit (R-MACA, R-SGPU): the service the runtime wrapper asks, over a unix socket, what a container's
OCI spec gets at its start (`metax_core.runtime.container_edit`), with the C wrapper's source beside it."""
