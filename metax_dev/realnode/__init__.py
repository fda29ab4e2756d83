"""Real Kubernetes nodes for the test harness: kubelet + containerd + runc built here, running real pods.

Why this package exists: the test control plane's kwok nodes never run a pod, so "a pod that asks for
a MetaX GPU gets it" could only be argued. This package joins real nodes to a
:class:`metax_dev.controlplane.cluster.ControlPlane`: a kubelet, containerd and runc from the cached
build (:mod:`metax_dev.controlplane.build`), local images (busybox-static and a static pause), a
minimal CNI plugin, each node in a private mount namespace, and a teardown that leaves the host as it
was (mounts, processes, sysctls, cgroup directories). See docs/realnode.md.

Modules (import them whole; this package re-exports nothing, and imports nothing, so that the CNI
plugin starts fast):

* ``launcher``: :class:`~metax_dev.realnode.launcher.RealNodes`, N nodes up and down as one;
  ``reap_stale`` for launchers that were killed;
* ``node``: :class:`~metax_dev.realnode.node.RealNode`, one node's start order and teardown;
* ``hostns``: the node's private mount namespace (``/var/lib``, ``/var/log``, ``/run``, ``/dev``);
* ``containerd``, ``kubelet``: their configuration for this machine's sandbox;
* ``cloud``: the stand-in cloud controller (node address 127.0.0.1, uninitialized taint);
* ``cni``: the loopback-only CNI plugin;
* ``images``: OCI image archives made from local files;
* ``hygiene``: sysctls, cgroup directories, and a snapshot of the host for the teardown test;
* ``errors``: ``NodeError``; ``cli``: ``python -m metax_dev.realnode up|down``.
"""
