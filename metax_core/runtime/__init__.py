"""The container-runtime side of a GPU node (C4, R-MACA, R-SGPU): how the node's runtime is configured to start
MetaX containers, and what happens to a container's spec at its start."""
