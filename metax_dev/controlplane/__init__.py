"""A real Kubernetes control plane on loopback, for integration tests and development.

Why this package exists: the operator's cluster adapter must be proven against the real
kube-apiserver (RBAC, admission, server-side apply, watches that survive a restart), and
workloads must really be scheduled and run, not faked. This package builds etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok from their upstream Go
modules (the small Go module in ``metax_dev/controlplane/gomod``), caches the binaries, and starts
them on free 127.0.0.1 ports with a throw-away PKI, an admin kubeconfig and a number of
kwok-simulated nodes whose pods kwok marks Running.

Use it as a context manager::

    from metax_dev.controlplane import cluster

    with cluster.ControlPlane(nodes=3) as cp:
        api = cp.api_client()        # kubernetes.client.ApiClient, admin credentials
        ...

or from a shell: ``python -m metax_dev.controlplane up --nodes 5`` (prints the
kubeconfig path and runs until Ctrl-C) and ``python -m metax_dev.controlplane build``.

Modules (import them whole; this package re-exports nothing):

* ``cluster``: :class:`~metax_dev.controlplane.cluster.ControlPlane`, start order, readiness,
  kwok nodes, ``restart_apiserver``, timings;
* ``build``: the Go build and the binary cache (``build.build()``, ``build.module_versions()``);
* ``components``: every component's credentials, config files and flags;
* ``pki``: the throw-away CA, certificates, service-account keys, kubeconfigs;
* ``processes``: starting, stopping and log-tailing child processes, the ``atexit`` hook,
  reaping orphaned work dirs;
* ``network``: loopback address, free ports, the launcher's small HTTPS client;
* ``nodes``: the kwok Node objects (labels, annotation, resources) and their readiness;
* ``errors``: ``ControlPlaneError`` and ``GoNotFoundError``;
* ``cli``: ``python -m metax_dev.controlplane up|build|versions`` and ``up(nodes)``.

Every process runs in its own process group; ``stop()``, an ``atexit`` hook and a
parent-death signal make sure none outlives the Python process that started it.
Nothing here dials anything but 127.0.0.1: nodes advertise 127.0.0.1, and the pod and
service ranges are bookkeeping only (see docs/controlplane.md).
"""
