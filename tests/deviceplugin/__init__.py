"""gpu-device over the real kubelet device plugin protocol: a test kubelet, fakes, and the tests."""

import os

# As in services/gpu_device/__main__.py: the fake host's tools (mx-smi) run as child processes while gRPC
# threads serve the test kubelet in this process; gRPC's fork handlers can abort such a child (signal 6)
# before it execs. Must be set before grpc is imported (this package's modules import it).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
