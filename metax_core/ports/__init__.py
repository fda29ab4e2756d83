"""The ports of the hexagon: what the core needs from hardware (`hardware`) and from the cluster (`cluster`).

They are `typing.Protocol`s named by role; adapters are named by technology (`SysfsDeviceInventory`,
`FakeHost...`, `K8s...`, `InMemory...`). Each port has one contract test suite run against every adapter.
"""
