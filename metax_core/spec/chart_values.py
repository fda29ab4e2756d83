"""Chart values as Helm users write them: a string stands for the boolean or integer Helm would have made.

Why: ``helm install --set gpuDevice.healthyInterval=9`` gives the integer 9 (Helm's ``--set`` reads ``true``,
``false`` and decimal integers), but ``--set-string``, tools that pass every value as a string (Argo CD's
``forceString``, Terraform's ``helm_release``) and quoted values files give the string ``"9"``. Both mean the
same, so in chart values a string at a boolean or integer field is read as Helm's ``--set`` would read it:

- a boolean field takes exactly ``"true"`` or ``"false"``;
- an integer field (and the integer form of an int-or-percent field) takes a decimal integer without sign
  ``+``, spaces or leading zeros (``"0"``, ``"9"``, ``"-1"``, at most 18 digits): ``"09"`` (octal in YAML 1.1),
  ``"9.0"``, ``"1e3"`` and ``" 9"`` stay strings and are refused with the field's path, as Helm itself keeps them.

Anything else is left as written, so the converter refuses it with its usual message. The ClusterOperator
object stays strict (the CRD types these fields, and the API server refuses a string there): the chart's
template turns the same strings into the same values (``templates/_values.tpl``, generated from `paths`
by ``metax_dev.chart``), so the object Helm creates holds booleans and integers, and
``metax-operator validate -f values.yaml`` accepts what ``helm install -f values.yaml`` accepts.

The walk follows the spec model, never the input, so however deep a document nests it stays shallow.
"""

from __future__ import annotations

import enum
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from metax_core.spec import converter
from metax_core.spec import model as spec

INTEGER_PATTERN = r"0|-?[1-9][0-9]{0,17}"
"""A decimal integer as Helm's ``--set`` reads one, limited to 18 digits (always inside int64)."""
BOOLEANS = {"true": True, "false": False}

_INTEGER = re.compile(INTEGER_PATTERN)


class Kind(enum.Enum):
    """What a string stands for at a field."""

    BOOLEAN = "bool"
    INTEGER = "int"


# Fields whose converter hook already reads strings with a meaning of their own (converter._SPECIAL_STRUCTURE):
# pauseDuration ("10000", "10s") and gpus ("0,1"); their documents are the same in values and in the object.
_OWN_STRINGS = frozenset({(spec.UpgradeStep, "pause_duration"), (spec.VfioConfigEntry, "gpus")})


def _optional(tp: Any) -> Any:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _element(tp: Any) -> Any | None:
    """X of ``tuple[X, ...]``, else None."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def _kind(tp: Any) -> Kind | None:
    if tp is bool:
        return Kind.BOOLEAN
    if tp is int or tp is spec.IntOrPercent:
        return Kind.INTEGER
    return None


def _fields(cl: type) -> Iterator[tuple[str, Any, bool]]:
    """(document key, type without None, whether the converter reads its strings itself) per field of ``cl``."""
    for field in attrs.fields(attrs.resolve_types(cl)):
        tp = _optional(field.type)
        # a quantity's converter reads "128Mi" and "2" itself, as the object does
        own = (cl, field.name) in _OWN_STRINGS or tp is spec.Quantity
        yield converter.camel_case(field.name), tp, own


def paths(cl: type = spec.ClusterOperatorSpec, prefix: str = "") -> tuple[tuple[str, Kind], ...]:
    """Every field where a string stands for a boolean or an integer: ``("driver.upgradePolicy.upgradeSteps[].
    replicas", Kind.INTEGER)``; ``[]`` marks a list whose every item is such a record."""
    found: list[tuple[str, Kind]] = []
    for key, tp, own in _fields(cl):
        here = f"{prefix}.{key}" if prefix else key
        element = _element(tp)
        if own:
            continue
        if (kind := _kind(tp)) is not None:
            found.append((here, kind))
        elif isinstance(tp, type) and attrs.has(tp):
            found += paths(tp, here)
        elif element is not None and isinstance(element, type) and attrs.has(element):
            found += paths(element, here + "[]")
    return tuple(found)


def read(value: object, kind: Kind) -> object:
    """What ``value`` means at a field of ``kind``: the boolean or integer a string stands for, else ``value``."""
    if not isinstance(value, str):
        return value
    if kind is Kind.BOOLEAN:
        return BOOLEANS.get(value, value)
    if _INTEGER.fullmatch(value):
        return int(value)
    return value


def _record(cl: type, document: object) -> object:
    if not isinstance(document, Mapping):
        return document
    result = dict(document)
    for key, tp, own in _fields(cl):
        if key not in document or own:
            continue
        value = document[key]
        element = _element(tp)
        if (kind := _kind(tp)) is not None:
            result[key] = read(value, kind)
        elif isinstance(tp, type) and attrs.has(tp):
            result[key] = _record(tp, value)
        elif element is not None and isinstance(element, type) and attrs.has(element) and isinstance(value, list):
            result[key] = [_record(element, item) for item in value]
    return result


def canonical(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """Chart values with every string that stands for a boolean or an integer replaced by it (a new mapping;
    ``document`` is not changed)."""
    result = _record(spec.ClusterOperatorSpec, document)
    return typing.cast(Mapping[str, Any], result)
