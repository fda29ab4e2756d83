"""Generated gRPC code of a kubelet plugin API (see metax_k8s/dra/regen.py)."""
