"""The cluster side of the hexagon: everything that speaks the Kubernetes API.

`crd` generates the ClusterOperator CustomResourceDefinition from the core's spec model. `client` builds an
authenticated connection and `HttpApi`, the real `api.Api` (one HTTP verb per method). `objects`, `nodes`, `events` and
`lease` implement the ports of `metax_core.ports.cluster` on top of any `Api`; `inmemory` is an
in-memory API server with the same semantics (resource versions, server-side apply ownership, selectors,
watches that expire) and `inmemory.InMemoryCluster` wires the ports to it, so the demo and the fast tests run
the very same port code as production. `retry` holds the errors and the retry policy both share.
"""
