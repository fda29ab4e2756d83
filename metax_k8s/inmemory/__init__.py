"""An in-memory Kubernetes API server and every cluster port wired to it, for fast tests and the demo.

`server` (the `Api` without HTTP), `store` (objects, versions, history), `kinds`, `schema` (admission), `select`
(selectors), `ssa` (field ownership), `watch` (history and streams), `cluster` (`InMemoryCluster`: the ports on
one server).
"""

from metax_k8s.inmemory.cluster import InMemoryCluster
from metax_k8s.inmemory.server import InMemoryApiServer

__all__ = ["InMemoryApiServer", "InMemoryCluster"]
