"""Per-GPU health: one model that every consumer reads the same way (R-HEALTH, docs/health.md).

- `faults`: the fault kinds a reading can show, each with its severity (unusable, degraded), and the rules
  that turn what the hardware says (sysfs, mx-smi or libmxsml) into faults.
- `verdict`: how readings over time become a verdict per GPU (consecutive readings to fail and to clear, a
  failed reading is unknown, not unhealthy).
- `report`: the verdict as the node's agent publishes it on its Node (annotation), read by the operator's
  node condition and remediation and by doctor.

Which pods the operator evicts for an unusable GPU is `metax_core.cluster.gpu_remediation`'s (it reads the
cluster's pods).
"""
