"""The chart's README.md: install, upgrade and uninstall commands, the driver rollout commands from
docs/rollout.md, the RBAC table (`metax_core.cluster.rbac`) with the node-bound policy
(`metax_core.cluster.node_policy`) and the option tables (the spec model and `OPERATOR_OPTIONS`)."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from metax_core.cluster import node_bound, node_policy, rbac
from metax_core.spec import model as spec
from metax_dev.chart import security
from metax_dev.chart.options import GENERATED, OPERATOR_OPTIONS, Schema
from metax_k8s.crd import schema as crd_schema

# --- option tables ----------------------------------------------------------------------------------------


def _type_name(node: Schema) -> str:
    if "anyOf" in node:
        return " \\| ".join(_type_name(n) for n in node["anyOf"])
    kind = node.get("type")
    if isinstance(kind, list):
        kind = kind[0]
    if node.get("x-kubernetes-int-or-string"):
        return "int \\| string (%)"
    if "enum" in node:
        return "enum"
    if kind == "array":
        return f"list of {_type_name(node.get('items', {}))}"
    return str(kind or "object")


def _options(node: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    for key, child in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        yield here, child
        if child.get("type") == "object" and "properties" in child:
            yield from _options(child, here)
        elif child.get("type") == "array" and "properties" in child.get("items", {}):
            yield from _options(child["items"], here + "[]")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def option_rows() -> list[tuple[str, str, str, str]]:
    """(option, type, default, meaning) for every spec option, from the CRD schema (= the spec model)."""
    rows = []
    for path, node in _options(crd_schema.record_schema(spec.ClusterOperatorSpec)):
        kind = _type_name(node)
        if "enum" in node:
            kind = "enum: " + ", ".join(f"`{v}`" for v in node["enum"])
        default = f"`{json.dumps(node['default'])}`" if "default" in node else "—"
        if path.endswith("podTemplateSpec") or path == "tolerations":
            default = "—"
        rows.append((f"`{path}`", kind, default, _cell(node.get("description", ""))))
    return rows


def _operator_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    for path, default, schema, meaning in OPERATOR_OPTIONS:
        kind = _type_name(schema)
        if "enum" in schema:
            kind = "enum: " + ", ".join(f"`{v}`" for v in schema["enum"])
        rows.append((f"`operator.{path}`", kind, f"`{json.dumps(default)}`", _cell(meaning)))
    return rows


# --- README.md --------------------------------------------------------------------------------------------


def _table(rows: list[tuple[str, str, str, str]]) -> str:
    lines = ["| option | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def rollout_commands(docs_dir: Path) -> str:
    """The corrected §3.2.8 commands, taken from docs/rollout.md (the first ``sh`` block of its pause section)."""
    text = (docs_dir / "rollout.md").read_text()
    section = text.split("## Pausing, resuming, rolling back", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    if match is None:
        raise ValueError("docs/rollout.md has no sh block under 'Pausing, resuming, rolling back'")
    return match.group(1)


README_TEMPLATE: Final = """\
<!-- {generated} -->
# metax-operator Helm chart

Installs the MetaX GPU Operator (R-INSTALL): the CRD `clusteroperators.gpu.metax-tech.com`, the operator
Deployment (unprivileged, non-root, read-only root filesystem), its ServiceAccount and least-privilege RBAC,
the validating webhook (docs/webhook.md), and the `cluster-operator` object rendered from these values. The
node components (DaemonSets, their ServiceAccounts and RBAC) are rendered by the operator from the same spec,
not by templates.

## Install

```sh
{install}
```

With a private registry: `--set registry=DOMAIN/PROJECT` (every image and, by default, the payloads come
from it). The deprecated global tolerations of §3.2.4 still work: `--set-file tolerations=<file>`, where the
file holds `tolerations:` followed by a Kubernetes toleration list (or the bare list).

Check it:

```sh
kubectl -n metax-operator rollout status deployment/metax-operator
kubectl get clusteroperators.gpu.metax-tech.com cluster-operator
```

## Upgrade and change values

`helm upgrade metax-operator charts/metax-operator -n metax-operator --reuse-values --set ...` changes the
`cluster-operator` object; the operator re-renders the components. `kubectl edit clusteroperator
cluster-operator` changes the same fields, and Helm does not see it: for a custom resource Helm 3 sends a
JSON merge patch computed from the previous release's manifest to the new one (two-way, not from the live
object), so a `kubectl` edit of a field survives every later `helm upgrade` that leaves that field's rendered
value unchanged, and `helm get values` does not show it. Change values one way: prefer `helm upgrade`.

## Upgrade

`helm upgrade` to the next release with the values you installed with (a values file, or
`--reset-then-reuse-values`: plain `--reuse-values` keeps the previous chart's defaults, its image digests
included). A pre-upgrade hook runs the new release's `metax-operator apply-crd` first: Helm never upgrades `crds/`,
and the previous schema would prune the new release's fields. No driver is reloaded and running GPU workloads keep
their devices; the agents roll node by node. `helm rollback` goes back the same way and keeps the newer CRD. Set a
field a release adds only after the upgrade to it has finished. The procedure, the guarantees and the CRD policy:
docs/upgrade.md.

## Uninstall

```sh
{uninstall}
```

A pre-delete hook deletes `cluster-operator` first and waits until the operator's finalizer has removed
everything the operator created (DaemonSets, ConfigMaps, component ServiceAccounts and RBAC, node labels and
annotations); then Helm removes the operator, its RBAC, the webhook and its certificate Secret. By Helm
convention the CRD stays; remove it (and with it any leftover ClusterOperator) with:

```sh
kubectl delete crd clusteroperators.gpu.metax-tech.com
```

## Driver rollout commands (§3.2.8, corrected)

The seed's commands are wrong (see docs/rollout.md); these are the correct ones:

```sh
{rollout}```

## What runs where (R-SECURITY, 000 Table 1.3.1, §1.3.2, §1.3.4)

Privilege only on GPU nodes: `metax-gpu-discovery`, unprivileged, runs on every node and sets
`metax-tech.com/gpu.installed=true` where it finds MetaX GPUs; every privileged agent selects that label. Every
container has a read-only root and its own `/tmp`; unprivileged ones run as UID 65532 with no capability; a token
is mounted only into the container that calls the API (docs/security.md).

{workloads_table}

## Permissions (R-SECURITY, 000 Table 1.3.1)

Every workload runs as its own ServiceAccount with only these rules (from `metax_core/cluster/rbac.py`; the
operator renders the components' accounts and roles with their workloads, the chart renders the operator's).
No rule uses `*`; nobody may read Secrets cluster-wide, exec into pods, delete nodes or escalate roles (tested
with SubjectAccessReviews on a real API server). `metax-data-exporter` runs on the namespace's default account
without a token, so it has none.

{rbac_table}

{node_policy}

`metax-operator doctor` (docs/doctor.md) reads only: with `--set operator.doctor.enabled=true` the chart adds the
ServiceAccount `metax-operator-doctor` and the read-only roles above, bound to it and to every subject in
`operator.doctor.subjects` (e.g. your admins' group); without it, doctor needs an identity that may read the same.

## Options: the ClusterOperator spec

Every option, its type, default and meaning, from the spec model (001 Tables 3.1–3.18). Bad values are
refused by `helm install` (values.schema.json, generated from the same model) and by the webhook, with the
field path and what is allowed.

{spec_table}

## Options: the operator Deployment and webhook (chart only)

{operator_table}
"""

INSTALL_COMMANDS: Final = (
    "helm install metax-operator charts/metax-operator -n metax-operator --create-namespace \\\n"
    "  --set registry=DOMAIN/PROJECT --set driver.payload.version=VERSION --wait"
)
UNINSTALL_COMMANDS: Final = "helm uninstall metax-operator -n metax-operator --wait"


def _rules_cell(rules: tuple[rbac.Rule, ...]) -> str:
    if not rules:
        return "—"
    parts = []
    for rule in rules:
        names = f" ({', '.join(rule.names)})" if rule.names else ""
        group = f"{rule.group}/" if rule.group else ""
        parts.append(f"{', '.join(group + r for r in rule.resources)}: {' '.join(rule.verbs)}{names}")
    return "<br>".join(parts)


def rbac_table() -> str:
    lines = ["| ServiceAccount | cluster-wide | operator namespace | `default` (node Events) |", "|---|---|---|---|"]
    for account in [rbac.operator_rules(), *rbac.COMPONENT_RULES.values(), rbac.doctor_rules()]:
        cells = [_rules_cell(account.cluster), _rules_cell(account.namespace), _rules_cell(account.events)]
        only = " (only with `operator.doctor.enabled`)" if account.account == rbac.DOCTOR_ACCOUNT else ""
        lines.append(f"| `{account.account}`{only} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _accounts(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def node_policy_text() -> str:
    """What `metax_core.cluster.node_policy` adds to the table's rules, and from which Kubernetes minor."""
    bound = node_bound.node_bound()
    major, minor = node_policy.MINIMUM_KUBERNETES
    prefix = node_policy.KEY_PREFIX
    text = (
        f"**Node-bound agent writes (R-NODEBOUND).** RBAC cannot name the node a pod runs on, so the rules above let a "
        f"node agent patch any Node. On Kubernetes {major}.{minor} and later the chart also installs the "
        f"ValidatingAdmissionPolicy `{node_policy.POLICY_NAME}` and its binding (`templates/node-policy.yaml`, "
        f"from `metax_core/cluster/node_policy.py` and the same rules): a token of {_accounts(bound.accounts)} "
        f"must be bound to a pod (it then carries its node's name, `{node_policy.NODE_NAME_EXTRA}`) and may change "
        f"only that Node, and on it only `{prefix}` labels and annotations (not its spec: no taint, cordon or "
        f"podCIDR)"
    )
    if bound.resource_slices:
        text += f"; {_accounts(bound.resource_slices)} may write only the ResourceSlices of its node"
    if bound.events:
        text += (
            f"; Events in `{node_policy.EVENTS_NAMESPACE}` may be written or deleted only about the agent's own Node"
        )
    return textwrap.fill(
        text + ". Each refusal says what was refused and why. Below "
        f"{major}.{minor} there is no such policy and agent writes are not node-bound: `helm install` says so in "
        "its notes. `kubectl auth can-i` does not see admission policies; a server-side dry run as the agent does "
        "(docs/security.md).",
        width=115,
        break_long_words=False,
        break_on_hyphens=False,
    )


def render_readme(docs_dir: Path) -> str:
    return README_TEMPLATE.format(
        rbac_table=rbac_table(),
        workloads_table=security.workloads_table(),
        node_policy=node_policy_text(),
        generated=GENERATED,
        install=INSTALL_COMMANDS,
        uninstall=UNINSTALL_COMMANDS,
        rollout=rollout_commands(docs_dir),
        spec_table=_table(option_rows()),
        operator_table=_table(_operator_rows()),
    )
