"""``python -m metax_k8s.crd``: print the CRD the chart checks in (docs/kubernetes.md)."""

from __future__ import annotations

from metax_k8s import crd

if __name__ == "__main__":
    crd.main()
