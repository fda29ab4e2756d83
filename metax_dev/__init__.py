"""Developer tooling for the MetaX GPU operator.

Why this package exists: the operator's tests and its developers need things that are
not part of the operator itself, above all a real Kubernetes control plane on loopback
(``metax_dev.controlplane``), built from upstream Go modules and started in seconds.
Nothing in the operator's runtime packages may import from here.
"""
