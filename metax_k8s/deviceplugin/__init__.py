"""The kubelet device plugin adapter: the v1beta1 gRPC protocol, a plugin server per resource, and the
host files the plugin writes (CDI spec, readiness signals).

Decisions (which devices, which allocation) come from `metax_core.node.devices` and `metax_core.node.cdi`; this
package only speaks the protocol and touches files.
"""
