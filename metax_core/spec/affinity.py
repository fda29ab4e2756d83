"""The shape of a core/v1 ``Affinity`` that a ``podTemplateSpec.spec.affinity`` may hold.

Why: the spec keeps an affinity as a raw mapping (the operator passes it through to the workloads), and the
CRD cannot describe it in full, so without this check an unknown field, a wrong type or a key that is not a
label key would be accepted here and refused by the API server when the operator applies the DaemonSet.
The same goes for a requirement whose ``values`` do not fit its operator (``In`` with none, ``Exists`` with
some, ``Gt`` without one integer), for ``matchFields``, which only knows ``metadata.name``, and for a pod
affinity term's namespaces (DNS labels) and ``matchLabelKeys``/``mismatchLabelKeys``.
The walk follows the schema below, never the input, so however deep the input nests the walk stays
shallow; unknown fields are reported and not entered. Every problem comes back with its path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from metax_core.errors import FieldError
from metax_core.spec import names

Check = Callable[[object, str, list[FieldError]], None]
_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_NODE_OPERATORS = (*_LABEL_OPERATORS, "Gt", "Lt")
MAX_ITEMS = 100


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return type(value).__name__


def _string(problem: Callable[[str], str | None] | None = None, choices: tuple[str, ...] = ()) -> Check:
    def check(value: object, path: str, errors: list[FieldError]) -> None:
        if not isinstance(value, str):
            errors.append(FieldError(path, f"must be a string, got {_kind(value)}"))
        elif choices and value not in choices:
            errors.append(FieldError(path, f"must be one of {', '.join(choices)}"))
        elif problem is not None and (message := problem(value)) is not None:
            errors.append(FieldError(path, message))

    return check


def _weight(value: object, path: str, errors: list[FieldError]) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        errors.append(FieldError(path, "must be an integer from 1 to 100"))


def _list(item: Check, *, required: bool = False) -> Check:
    def check(value: object, path: str, errors: list[FieldError]) -> None:
        if not isinstance(value, list):
            errors.append(FieldError(path, f"must be a list, got {_kind(value)}"))
            return
        if len(value) > MAX_ITEMS:
            errors.append(FieldError(path, f"must list at most {MAX_ITEMS} items"))
            return
        if required and not value:
            errors.append(FieldError(path, "must not be empty"))
        for i, element in enumerate(value):
            item(element, f"{path}[{i}]", errors)

    return check


def _record(fields: Mapping[str, Check], required: tuple[str, ...] = ()) -> Check:
    def check(value: object, path: str, errors: list[FieldError]) -> None:
        if not isinstance(value, Mapping):
            errors.append(FieldError(path, f"must be a mapping, got {_kind(value)}"))
            return
        for key, element in value.items():
            here = f"{path}.{key}" if isinstance(key, str) else f"{path}[{_kind(key)} key]"
            if not isinstance(key, str):
                errors.append(FieldError(here, "keys must be strings"))
            elif key not in fields:
                errors.append(FieldError(here, f"unknown field; allowed here: {', '.join(fields)}"))
            else:
                fields[key](element, here, errors)
        for key in required:
            if key not in value:
                errors.append(FieldError(f"{path}.{key}", "required field is missing"))

    return check


def _label_map(value: object, path: str, errors: list[FieldError]) -> None:
    if not isinstance(value, Mapping):
        errors.append(FieldError(path, f"must be a mapping, got {_kind(value)}"))
        return
    for key, element in value.items():
        if not isinstance(key, str) or not isinstance(element, str):
            errors.append(FieldError(f"{path}", "keys and values must be strings"))
            continue
        problem = names.label_key_problem(key) or names.label_value_problem(element)
        if problem:
            errors.append(FieldError(f"{path}.{key}", problem))


_INTEGER = re.compile(r"[0-9]{1,18}")
_NODE_NAME_FIELD = "metadata.name"


def _values_rule(operator: object, values: object, *, field_selector: bool) -> str | None:
    """What the API server requires of ``values`` for ``operator`` (apimachinery ``ValidateLabelSelectorRequirement``,
    core ``ValidateNodeSelectorRequirement`` and ``ValidateNodeFieldSelectorRequirement``), or None when it holds.

    Gt/Lt compare the node label as an integer (the scheduler parses it), so their one value must be one.
    """
    items = values if isinstance(values, list) else []
    count = len(items)
    if field_selector:
        if operator in ("In", "NotIn") and count != 1:
            return f"must list exactly one node name when operator is {operator} (matchFields), got {count} values"
        return None
    if operator in ("In", "NotIn") and count == 0:
        return f"must list at least one value when operator is {operator} (use Exists to match any value)"
    if operator in ("Exists", "DoesNotExist") and count:
        return f"must be empty or left out when operator is {operator}, got {count} values (use In to match values)"
    integer = count == 1 and isinstance(items[0], str) and _INTEGER.fullmatch(items[0]) is not None
    if operator in ("Gt", "Lt") and not integer:
        return f'must be exactly one integer value like ["5"] when operator is {operator}'
    return None


def _requirement(operators: tuple[str, ...], *, field_selector: bool = False) -> Check:
    """One matchExpressions (or matchFields) entry: the record's shape, then its values against its operator."""
    if field_selector:
        shape = _record(
            {
                "key": _string(choices=(_NODE_NAME_FIELD,)),
                "operator": _string(choices=("In", "NotIn")),
                "values": _list(_string(names.dns_subdomain_problem)),
            },
            required=("key", "operator"),
        )
    else:
        shape = _record(
            {
                "key": _string(names.label_key_problem),
                "operator": _string(choices=operators),
                "values": _list(_string(names.label_value_problem)),
            },
            required=("key", "operator"),
        )

    def check(value: object, path: str, errors: list[FieldError]) -> None:
        before = len(errors)
        shape(value, path, errors)
        if len(errors) > before or not isinstance(value, Mapping):
            return
        problem = _values_rule(value.get("operator"), value.get("values"), field_selector=field_selector)
        if problem:
            errors.append(FieldError(f"{path}.values", problem))

    return check


_LABEL_SELECTOR = _record({"matchLabels": _label_map, "matchExpressions": _list(_requirement(_LABEL_OPERATORS))})
_NODE_SELECTOR_TERM = _record(
    {
        "matchExpressions": _list(_requirement(_NODE_OPERATORS)),
        "matchFields": _list(_requirement(("In", "NotIn"), field_selector=True)),
    }
)


def _label_keys_errors(term: Mapping[str, Any], path: str) -> list[FieldError]:
    """core ``ValidateMatchLabelKeysAndMismatchLabelKeys``: the keys need a labelSelector, a matchLabelKeys key
    may not also be selected twice by it, and no key is in both lists."""
    match, mismatch = term.get("matchLabelKeys") or [], term.get("mismatchLabelKeys") or []
    selector = term.get("labelSelector")
    errors = []
    for name, keys in (("matchLabelKeys", match), ("mismatchLabelKeys", mismatch)):
        if keys and selector is None:
            errors.append(FieldError(f"{path}.{name}", "must not be set without a labelSelector"))
    if isinstance(selector, Mapping):
        seen = set(selector.get("matchLabels") or {})
        for expression in selector.get("matchExpressions") or []:
            key = expression.get("key")
            if key in match and key in seen:
                index = match.index(key)
                errors.append(FieldError(f"{path}.matchLabelKeys[{index}]", "is also in the labelSelector"))
            seen.add(key)
    for index, key in enumerate(match):
        if key in mismatch:
            errors.append(FieldError(f"{path}.matchLabelKeys[{index}]", "is also in mismatchLabelKeys"))
    return errors


def _pod_affinity_term() -> Check:
    shape = _record(
        {
            "labelSelector": _LABEL_SELECTOR,
            "namespaceSelector": _LABEL_SELECTOR,
            "namespaces": _list(_string(names.dns_label_problem)),
            "topologyKey": _string(names.label_key_problem),
            "matchLabelKeys": _list(_string(names.label_key_problem)),
            "mismatchLabelKeys": _list(_string(names.label_key_problem)),
        },
        required=("topologyKey",),
    )

    def check(value: object, path: str, errors: list[FieldError]) -> None:
        before = len(errors)
        shape(value, path, errors)
        if len(errors) == before and isinstance(value, Mapping):
            errors.extend(_label_keys_errors(value, path))

    return check


_POD_AFFINITY_TERM = _pod_affinity_term()
_POD_AFFINITY = _record(
    {
        "requiredDuringSchedulingIgnoredDuringExecution": _list(_POD_AFFINITY_TERM),
        "preferredDuringSchedulingIgnoredDuringExecution": _list(
            _record({"weight": _weight, "podAffinityTerm": _POD_AFFINITY_TERM}, required=("weight", "podAffinityTerm"))
        ),
    }
)
AFFINITY = _record(
    {
        "nodeAffinity": _record(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": _record(
                    {"nodeSelectorTerms": _list(_NODE_SELECTOR_TERM, required=True)}, required=("nodeSelectorTerms",)
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": _list(
                    _record({"weight": _weight, "preference": _NODE_SELECTOR_TERM}, required=("weight", "preference"))
                ),
            }
        ),
        "podAffinity": _POD_AFFINITY,
        "podAntiAffinity": _POD_AFFINITY,
    }
)


def errors(affinity: Mapping[str, Any], path: str) -> list[FieldError]:
    """Every problem in ``affinity`` (a core/v1 Affinity), with paths under ``path``."""
    found: list[FieldError] = []
    AFFINITY(affinity, path, found)
    return found
