"""The shared skeleton of every node agent (gpu-label, driver-manager, vfio-manager, gpu-device, ...).

`settings` reads an agent's settings from the environment through one cattrs converter (every bad variable
named, all at once); `loop` runs an agent's ticks until SIGTERM, with chores that come due on an injectable
clock and a log that says a thing once; `probe` is the readiness probe file the DaemonSet checks; `watch`
watches the agent's own Node and its ConfigMaps by name and wakes the loop when they change. Agents keep
only their gather → decide → act → publish step.
"""
