"""The MetaX GPU Operator's domain core.

Everything here is pure: no I/O, no clock reads, no subprocesses, no Kubernetes client. Services gather
inputs through the ports (`metax_core.ports`), ask a function here what to do, and apply the answer.
"""
