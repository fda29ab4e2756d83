"""A fake MetaX host under a temporary root that the real `metax_hw` adapter runs against.

`builder.FakeHostBuilder` lays out a sysfs/dev/lib tree like a GPU server's; `kernel.FakeKernel` gives
sysfs writes their effect (bind, unbind, driver_override, drivers_probe, sriov_numvfs); fake `modprobe`,
`insmod`, `rmmod`, `modinfo` and `mx-smi` executables (`tools`) act on the same tree; `host.FakeHost` hands
out the real adapters wired to it, injects faults and shows the state. Nothing here is imported at package
import time: the fake tools start a fresh interpreter per call and must stay quick (stdlib only below
`host` and `builder`).
"""
