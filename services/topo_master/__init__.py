"""topo-master (C7): the cluster view of GPU topology, one ConfigMap (docs/topology.md)."""
