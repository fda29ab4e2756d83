"""topo-worker (C7): discovers the node's GPU topology and publishes it (docs/topology.md)."""
