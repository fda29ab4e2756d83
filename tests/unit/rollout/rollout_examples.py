"""Upgrade policies shared by the rollout tests: the §3.2.8 worked example above all."""

from __future__ import annotations

from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent as IoP

SEED_POLICY = spec.UpgradePolicy(
    enable_rollout=True,
    upgrade_steps=(
        spec.UpgradeStep(IoP(2)),
        spec.UpgradeStep(IoP(5), pause_duration=10_000),
        spec.UpgradeStep(IoP(8), pause_duration=10_000),
        spec.UpgradeStep(IoP.of_percent(100)),
    ),
    max_parallel=IoP.of_percent(50),
    max_failure_threshold=3,
)
"""§3.2.8: steps 2, 5, 8, 100% on ten nodes; maxParallel 50%; pauses manual, 10 s, 10 s, manual."""
