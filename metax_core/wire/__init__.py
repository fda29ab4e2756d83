"""What crosses a process boundary, defined once (issue 20): the names and formats one process writes and
another reads, so that a writer and its reader can never disagree on a spelling.

Every format has exactly one owner in `metax_core`, which both sides import (render *and* parse in the same
module where there is a value to parse). Where a domain module already owns a format, it stays there;
this package holds the rest:

| format | owner |
|---|---|
| ConfigMap ``driver-config`` (name, keys, data) | `metax_core.node.driver_config` |
| ConfigMap ``metax-vfio-config`` (name, key, data) | `metax_core.node.vfio_config_map` |
| the two ConfigMaps as manifests (operator, ``metax-operator render``) | `metax_core.cluster.configmaps` |
| node labels (gpu-label's, driver-manager's, the administrator's gpu-device mode) | `metax_core.node.labels` |
| node annotations ``node-gpu-devices``, ``maca.versions`` | `metax_core.node.labels` |
| node annotation ``gpu-vfio`` (value rendered and parsed) | `metax_core.node.vfio` |
| node annotations ``gpu.topology`` (the topology document) | `metax_core.topology.document` |
| node annotations ``gpu.topology.scores`` / ``.losses`` (HAMi's) | `metax_core.topology.placement` |
| the kube-scheduler extender protocol and its configuration entry | `metax_core.topology.extender` |
| ConfigMap ``metax-topology`` (topo-master's cluster view) | `metax_core.topology.cluster_view` |
| readiness signal names (agents → gpu-device, doctor) | `metax_core.components.signal` |
| the readiness board (a file per signal under `host.READINESS_DIR`) | `metax_core.node.readiness` |
| which component a workload is, its ServiceAccount, host paths, RBAC, environment, probe | `metax_core.components` |
| the ConfigMaps' names (``driver-config``, ``metax-vfio-config``, ``metax-topology``) | `meta` |
| the environment the operator renders into agents' pods, and the agents' other settings | `agent_env` |
| the environment the chart renders into the operator's pod | `operator_env` |
| the environment a GPU workload's container is given (device plugin, DRA driver) | `workload_env` |
| the MXMACA version a workload asks for (``METAX_MACA_VERSION``) | `metax_core.versions` |
| host directories and files two processes share (CDI, kubelet sockets, device nodes, state) | `host` |
| the uninstall protocol (request annotation, per-agent done annotations) | `metax_core.node.uninstall` |
| the resource names the device plugin serves | `metax_core.node.devices.Resource` |
| labels, annotations and finalizer on the objects the operator owns and on cluster-operator | `meta` |
| Event reasons (``ALL`` built from the module) | `event_reasons` |
| the message and commands of a rollout step waiting for an administrator | `metax_core.rollout.confirm` |
"""
