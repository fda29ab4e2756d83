"""The product's components, each declared once (issue 43 item 2; C2–C10 of SPEC.md).

`declaration` says what a component declares (the record types), `catalogue` holds the ten declarations and the
tables derived from them, `access` the permissions a workload may declare, `plan` which components are deployed
in which order and what each waits for. The names below are the package's public face: callers write
``from metax_core import components`` and ``components.Component``, ``components.BY_COMPONENT``,
``components.plan(...)``.
"""

from metax_core.components.catalogue import (
    BY_COMPONENT,
    CATALOGUE,
    DRIVER_DAEMONSET,
    GPU_DISCOVERY,
    OPERATOR_WORKLOAD,
    UNDOING_AGENTS,
    WORKLOADS,
)
from metax_core.components.declaration import (
    AGENT_PROBE,
    Component,
    ComponentInfo,
    ReadinessProbe,
    Workload,
    WorkloadKind,
)
from metax_core.components.plan import (
    Blocked,
    DeployPlan,
    component_spec,
    deploy_order,
    enabled,
    plan,
    required_signals,
    requirements,
    signal,
)

__all__ = [
    "AGENT_PROBE",
    "BY_COMPONENT",
    "CATALOGUE",
    "DRIVER_DAEMONSET",
    "GPU_DISCOVERY",
    "OPERATOR_WORKLOAD",
    "UNDOING_AGENTS",
    "WORKLOADS",
    "Blocked",
    "Component",
    "ComponentInfo",
    "DeployPlan",
    "ReadinessProbe",
    "Workload",
    "WorkloadKind",
    "component_spec",
    "deploy_order",
    "enabled",
    "plan",
    "required_signals",
    "requirements",
    "signal",
]
