"""What runs where with which privilege: the workload table of the chart README and of docs/security.md.

Why generated: a security review reads this table, and it must be the model's (`metax_core.components`,
`host_paths`, `pod_security`), not a copy that drifts. docs/security.md is written by hand around it; only the part
between its markers is replaced (`render_security_doc`), and the generated-files test fails when it is stale.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from metax_core import components
from metax_core.cluster import pod_security
from metax_core.components import Workload, WorkloadKind

BEGIN: Final = "<!-- BEGIN GENERATED: workloads (python -m metax_dev.chart --write) -->"
END: Final = "<!-- END GENERATED: workloads -->"


def _where(workload: Workload) -> str:
    if workload.kind is WorkloadKind.DEPLOYMENT:
        return "any node (1 replica)"
    if workload.everywhere:
        return "**every node**, control plane included"
    return "GPU nodes (`gpu.installed=true`)"


def _paths(workload: Workload) -> str:
    paths = workload.host_paths
    return ", ".join(f"`{p}`{' ro' if ro else ''}" for p, ro in paths) or "none"


def _yes(flag: bool) -> str:
    return "**yes**" if flag else "no"


def workloads_table() -> str:
    """One row per workload the operator renders, then the chart's own operator Deployment."""
    rows = [
        "| Workload | Runs on | Privileged | hostPID | Host paths (`ro`: read-only) | Token (in) | Memory request / "
        "limit | Why |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for info in components.CATALOGUE:
        for w in info.workloads:
            why = pod_security.WHY.get(w.name)
            if why is None:
                raise ValueError(f"{w.name}: no line in metax_core.cluster.pod_security.WHY says why it holds what")
            holder = "agent container" if w.kind is WorkloadKind.DAEMON_SET else "its container"
            token = f"`{w.service_account}` ({holder})" if w.service_account else "none"
            request, limit = w.memory_mib
            cells = [
                f"`{w.name}`",
                _where(w),
                _yes(w.privileged),
                _yes(w.host_pid),
                _paths(w),
                token,
                f"{request} / {limit} MiB",
                why,
            ]
            rows.append("| " + " | ".join(cells) + " |")
    rows.append(
        "| `metax-operator` (the chart's) | any node (1 replica) | no | no | none | `metax-operator` | the chart's "
        "`operator.resources` | reconciles the ClusterOperator, serves the webhook: API only |"
    )
    return "\n".join(rows)


def render_security_doc(docs_dir: Path) -> str:
    """docs/security.md with its generated part replaced by the current table."""
    text = (docs_dir / "security.md").read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"docs/security.md has no {BEGIN} ... {END} section")
    return pattern.sub(lambda _: f"{BEGIN}\n{workloads_table()}\n{END}", text, count=1)
