"""The generated parts of the Helm chart: values.yaml, values.schema.json, README.md, the operator's RBAC, the
node agents' admission policy (templates/node-policy.yaml) and templates/_values.tpl (chart values as Helm users
write them, `metax_core.spec.chart_values`).

Why generated: the spec model (`metax_core.spec.model`) is the one definition of every chart option, its type,
default and meaning, and `metax_core.cluster.rbac` the one definition of what the operator may do. Hand-written
copies would drift; tests/dev/test_chart_generated.py fails when a checked-in file differs from what this
package produces. Regenerate with::

    python -m metax_dev.chart --write

Values = the ClusterOperator spec (R-VALUES) plus one chart-only section, ``operator``, for the operator's own
Deployment and webhook (`OPERATOR_OPTIONS`); the template that renders ``cluster-operator`` drops it.
"""

from __future__ import annotations

from metax_dev.chart.generate import generated_files, main
from metax_dev.chart.options import CHART_DIR, GENERATED, OPERATOR_OPTIONS, Schema, operator_defaults
from metax_dev.chart.rbac_templates import render_doctor_rbac, render_node_policy, render_operator_rbac
from metax_dev.chart.readme import (
    INSTALL_COMMANDS,
    UNINSTALL_COMMANDS,
    node_policy_text,
    option_rows,
    rbac_table,
    render_readme,
    rollout_commands,
)
from metax_dev.chart.schema import render_schema, schema_at, values_schema
from metax_dev.chart.values import render_values, render_values_template

__all__ = [
    "CHART_DIR",
    "GENERATED",
    "INSTALL_COMMANDS",
    "OPERATOR_OPTIONS",
    "UNINSTALL_COMMANDS",
    "Schema",
    "generated_files",
    "main",
    "node_policy_text",
    "operator_defaults",
    "option_rows",
    "rbac_table",
    "render_doctor_rbac",
    "render_node_policy",
    "render_operator_rbac",
    "render_readme",
    "render_schema",
    "render_values",
    "render_values_template",
    "rollout_commands",
    "schema_at",
    "values_schema",
]
