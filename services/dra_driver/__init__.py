"""dra-driver: MetaX GPUs through Dynamic Resource Allocation on one node (R-DRA, docs/dra.md)."""
