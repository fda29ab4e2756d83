"""The rollout status's document form: `to_document` / `from_document`, one cattrs converter with the spec
converter's scalar rules (see the package's docstring for the two deliberate differences from Table 3.16)."""

from __future__ import annotations

import datetime as dt
import enum
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError, IterableValidationError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from metax_core.errors import FieldError, InvalidSpec
from metax_core.rollout.status.records import ConditionStatus, Reason, UpgradeStatus, format_time, parse_time
from metax_core.spec import converter

# --- document form -----------------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: What a stored condition that lacks these keys (an older or hand-edited status) is read as.
_CONDITION_DEFAULTS = {
    "status": ConditionStatus.UNKNOWN.value,
    "lastTransitionTime": format_time(_EPOCH),
    "reason": Reason.NO_ROLLOUT.value,
}
#: Unset values are left out of the document, so the operator replaces the whole of it (see the docstring).
_OMITTED_WHEN_UNSET = frozenset(
    {
        "last_update_time",
        "recheck_time",
        "waiting_since",
        "confirm_token",
        "last_confirmation",
        "draining_nodes",
        "released_nodes",
    }
)


def _string(value: object, _: type) -> str:
    if not isinstance(value, str):
        raise converter.FieldValueError(f"must be a string, got {converter.describe(value)}")
    return value


def _count(value: object, _: type) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise converter.FieldValueError(f"must be an integer, got {converter.describe(value)}")
    if value < 0:
        raise converter.FieldValueError(f"must not be negative, got {value}")
    return value


def _time(value: object, _: type) -> dt.datetime:
    if not isinstance(value, str):
        raise converter.FieldValueError(f"must be an RFC 3339 time, got {converter.describe(value)}")
    try:
        return parse_time(value)
    except ValueError as exc:
        raise converter.FieldValueError(str(exc)) from exc


def _node_names(value: object, _: type) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise converter.FieldValueError("must be a list of node names (strings)")
    return tuple(sorted(set(value)))


def _is_tuple(t: object) -> bool:
    return typing.get_origin(t) in (tuple,)


def _build_converter() -> cattrs.Converter:
    """Table 3.16's document ⇄ the records: camelCase keys, RFC 3339 UTC times, unknown keys ignored."""
    conv = cattrs.Converter(forbid_extra_keys=False, detailed_validation=True)
    conv.register_structure_hook(str, _string)
    conv.register_structure_hook(int, _count)
    conv.register_structure_hook(bool, converter.strict_bool)
    conv.register_structure_hook(dt.datetime, _time)
    conv.register_unstructure_hook(dt.datetime, format_time)
    conv.register_structure_hook_func(lambda t: t == tuple[str, ...], _node_names)
    conv.register_structure_hook_factory(lambda t: _is_tuple(t) and t != tuple[str, ...], converter.list_hook(conv))
    conv.register_unstructure_hook_func(_is_tuple, lambda v: [conv.unstructure(x) for x in v])
    conv.register_structure_hook_factory(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum), converter.enum_hook
    )

    def structure_factory(cl: type) -> Callable[[object, type], Any]:
        names: dict[str, Any] = {a.name: override(rename=converter.camel_case(a.name)) for a in attrs.fields(cl)}
        inner: Callable[[Mapping[str, Any], Any], Any] = make_dict_structure_fn(cl, conv, **names)

        def structure(value: object, t: type) -> Any:
            if not isinstance(value, Mapping):
                raise converter.FieldValueError("must be a mapping")
            return inner(value, t)

        return structure

    def unstructure_factory(cl: type) -> Callable[[Any], dict[str, Any]]:
        names: dict[str, Any] = {
            a.name: override(rename=converter.camel_case(a.name), omit_if_default=a.name in _OMITTED_WHEN_UNSET)
            for a in attrs.fields(cl)
        }
        inner: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cl, conv, **names)
        order = [converter.camel_case(a.name) for a in attrs.fields(cl)]

        def unstructure(record: Any) -> dict[str, Any]:
            document = inner(record)  # keys in the table's order (cattrs puts omittable ones last)
            return {key: document[key] for key in order if key in document}

        return unstructure

    conv.register_structure_hook_factory(attrs.has, structure_factory)
    conv.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    return conv


_CONVERTER = _build_converter()


def to_document(status: UpgradeStatus) -> dict[str, Any]:
    """The ``status.upgradeStatus`` document: Table 3.16's camelCase keys, RFC 3339 UTC times."""
    document: dict[str, Any] = _CONVERTER.unstructure(status)
    return document


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _readable(document: Mapping[str, Any]) -> dict[str, Any]:
    """A stored document as the converter reads it: nulls are unset, the table's ``condition`` spelling is
    ``conditions``, and a condition's missing status, time or reason take their documented defaults."""
    readable: dict[str, Any] = _without_nulls(document)
    if "conditions" not in readable and "condition" in readable:
        readable["conditions"] = readable.pop("condition")
    if isinstance(readable.get("conditions"), list):
        readable["conditions"] = [
            {**_CONDITION_DEFAULTS, **c} if isinstance(c, Mapping) else c for c in readable["conditions"]
        ]
    return readable


def from_document(document: object) -> UpgradeStatus:
    """The record a `to_document` document (or an empty or older one) stands for; InvalidSpec if a value is bad."""
    if document is None:
        return UpgradeStatus()
    if not isinstance(document, Mapping):
        raise InvalidSpec([FieldError("upgradeStatus", "must be a mapping")])
    try:
        return _CONVERTER.structure(_readable(document), UpgradeStatus)
    except (ClassValidationError, IterableValidationError, converter.FieldValueError) as exc:
        raise InvalidSpec(converter.field_errors(exc)) from exc
