"""The node side of the domain: what node agents decide on one node's facts.

`policy` (R-DRIVER, R-FW), `driver_config` (R-VF, R-MODPARAM), `vfio` (R-VFIO), `labels` (R-LABELS),
`devices` and `cdi` (what gpu-device advertises and hands out), `readiness` (R-READY).
"""
