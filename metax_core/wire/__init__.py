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
| readiness signal names (agents → gpu-device, doctor) | `metax_core.cluster.components.signal` |
| labels, annotations and finalizer on the objects the operator owns and on cluster-operator | `meta` |
| Event reasons | `event_reasons` |
| the message and commands of a rollout step waiting for an administrator | `metax_core.rollout.confirm` |
"""
