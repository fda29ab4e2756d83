"""A process node: a Node the test harness registers itself and whose pods run as local processes.

Why this package exists: kwok marks pods Running without running anything, and the product has no container
image, so on kwok nodes the chart's operator Deployment and its pre-delete hook Job never execute. A process
node is a minimal kubelet for our own product's pods: it watches the pods the real scheduler binds to it and
runs each container's ``command`` from the project's virtualenv, with the pod's environment and its
ServiceAccount token (TokenRequest, bound to the pod), writes their status back, runs their probes, honours
restart policies and graceful deletion. No isolation, no image, host network: see docs/processnode.md.

Modules (import them whole): ``podspec`` (a container's command, env and probes from the pod spec),
``probes`` (httpGet, exec, tcpSocket), ``status`` (the pod status document), ``tokens`` (TokenRequest and the
in-cluster files), ``address`` (the node's own address on the loopback interface), ``container`` (one
container's state and process group), ``worker`` (one pod's processes), ``node`` (`ProcessNode`:
registration, heartbeat, the pod watch), ``standins`` (what stands in for images and the host when a process
node stands for a GPU node: test-only, docs/processnode.md).
"""
