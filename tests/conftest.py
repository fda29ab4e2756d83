"""Settings shared by every test folder: the hypothesis profiles.

CI must be reproducible: a property test that fails at random on a fresh machine is a flaky CI, so the
default profile ``ci`` is derandomized (the same examples every run, no example database) and prints the
failing example so that it can be kept as an explicit ``@example``. A longer randomised search is a
documented command (README "Tests"):

    HYPOTHESIS_PROFILE=long METAX_FUZZ_EXAMPLES=20000 .venv/bin/pytest tests/unit tests/fuzz
"""

from __future__ import annotations

import os

# Agents that serve or call gRPC also spawn mx-smi (gpu-device, data-exporter; their __main__ sets the same):
# gRPC's fork handlers are of no use to a child that execs at once, and with gRPC threads busy in this process
# (a test's kubelet) a forked child can abort in them. Must be set before grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("long", derandomize=False, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The test control plane's fixtures serve tests/integration and the cluster contract suite (tests/contract/cluster);
# the real nodes' serve tests/realnode and tests/e2e; the release's serve tests/release and tests/e2e.
pytest_plugins = ["tests.support.control_plane", "tests.support.real_node", "tests.support.release"]
