"""values.yaml (the ClusterOperator spec with every default, commented) and templates/_values.tpl (chart
values as Helm users write them, `metax_core.spec.chart_values`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import yaml

from metax_core.spec import chart_values, converter
from metax_core.spec import model as spec
from metax_dev.chart.options import GENERATED, Schema, operator_defaults
from metax_dev.chart.schema import values_schema

# --- values.yaml ------------------------------------------------------------------------------------------


def _comment(text: str, indent: int) -> list[str]:
    words = " ".join(text.split())
    lines, line = [], ""
    for word in words.split(" "):
        if line and len(line) + len(word) > 100 - indent:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return [" " * indent + "# " + line for line in lines]


def _yaml_value(value: object) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _values_lines(schema: Schema, values: dict[str, Any], indent: int = 0) -> list[str]:
    lines: list[str] = []
    for key, node in schema.get("properties", {}).items():
        if "description" in node:
            lines += _comment(node["description"], indent)
        value = values.get(key)
        if key not in values:
            lines.append(" " * indent + f"# {key}:")
        elif isinstance(value, dict) and value and "properties" in node:
            lines.append(" " * indent + f"{key}:")
            lines += _values_lines(node, value, indent + 2)
        else:
            lines.append(" " * indent + f"{key}: {_yaml_value(value)}")
    return lines


def render_values(image_digests: Mapping[str, str] | None = None) -> str:
    """values.yaml; a release (`metax_dev.release.chart`) passes its images' digests for ``operator.imageDigests``."""
    values = converter.unstructure(spec.ClusterOperatorSpec())
    for key in spec.NEW_FIELDS:  # commented out: rendered into cluster-operator only when set
        values.pop(key)
    values["operator"] = operator_defaults()
    if image_digests:
        values["operator"]["imageDigests"] = dict(sorted(image_digests.items()))
    header = [
        f"# {GENERATED}",
        "# The ClusterOperator spec with every default (R-VALUES): these values become the `cluster-operator`",
        "# object, so `helm upgrade --set ...` changes it. A commented-out key has no default.",
        "# `operator` holds the chart-only settings of the operator Deployment and its webhook.",
    ]
    return "\n".join([*header, *_values_lines(values_schema(), values)]) + "\n"


# --- templates/_values.tpl --------------------------------------------------------------------------------

VALUES_TEMPLATE_HEAD: Final = """\
{{- /* %s
     Chart values as Helm users write them (metax_core/spec/chart_values.py, docs/configuration.md): where
     a boolean or integer field holds the string `--set-string` (or a quoted values file) makes of it, the
     ClusterOperator gets the boolean or integer `--set` would have made, so the object the CRD types is
     what `metax-operator validate -f values.yaml` reads. "metax-operator.canonical" changes its argument
     (a copy of the values) in place. */ -}}
{{- define "metax-operator.canonical" -}}
"""

VALUES_TEMPLATE_TAIL: Final = """\
{{- end -}}

{{- /* One field: .node (a map) at .keys ("name[]" = every item of that list), read as .kind (bool|int). */ -}}
{{- define "metax-operator.canonicalAt" -}}
{{- $key := first .keys -}}
{{- $rest := rest .keys -}}
{{- $each := hasSuffix "[]" $key -}}
{{- $key = trimSuffix "[]" $key -}}
{{- if and (kindIs "map" .node) (hasKey .node $key) -}}
{{- $value := get .node $key -}}
{{- if $each -}}
{{- if kindIs "slice" $value -}}
{{- range $item := $value -}}
{{- include "metax-operator.canonicalAt" (dict "node" $item "keys" $rest "kind" $.kind) -}}
{{- end -}}
{{- end -}}
{{- else if $rest -}}
{{- include "metax-operator.canonicalAt" (dict "node" $value "keys" $rest "kind" .kind) -}}
{{- else if kindIs "string" $value -}}
{{- if and (eq .kind "bool") (has $value (list "true" "false")) -}}
{{- $_ := set .node $key (eq $value "true") -}}
{{- else if and (eq .kind "int") (regexMatch "^(%s)$" $value) -}}
{{- $_ := set .node $key (atoi $value) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
"""


def render_values_template() -> str:
    """templates/_values.tpl: the chart's copy of `chart_values.canonical`, one line per field it reads."""
    lines = []
    for path, kind in chart_values.paths():
        keys = " ".join(f'"{key}"' for key in path.split("."))
        arguments = f'(dict "node" . "keys" (list {keys}) "kind" "{kind.value}")'
        lines.append(f'{{{{- include "metax-operator.canonicalAt" {arguments} -}}}}')
    head = VALUES_TEMPLATE_HEAD % GENERATED
    return head + "\n".join(lines) + "\n" + VALUES_TEMPLATE_TAIL % chart_values.INTEGER_PATTERN
