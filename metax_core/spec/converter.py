"""The one converter between documents (YAML/JSON mappings, camelCase keys) and the spec records.

The CLI, the webhook, the operator and the CRD generator all use `CONVERTER` through `structure` and
`unstructure`, so a value means the same everywhere. Conversion is strict: a string is not a number, "false"
is not a boolean, unknown keys are errors (chart values are first read as Helm users write them:
`metax_core.spec.chart_values`). Every problem in a document is reported at once as a
`FieldError` whose path uses the document's own keys (``driver.upgradePolicy.maxParallel``).
"""

from __future__ import annotations

import difflib
import enum
import json
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec import limits
from metax_core.spec import model as spec

T = TypeVar("T")


class FieldValueError(ValueError):
    """A value of the right place but the wrong kind: the message says what is allowed."""


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def describe(value: object) -> str:
    """How an error message names a wrong value: its kind and, for scalars, the value (long ones shortened).

    Never recurses into containers, so a hostile nesting cannot make the message itself fail.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        digits = len(str(abs(value))) if abs(value) < 10**40 else 41
        return f"number {value}" if digits <= 40 else f"a {digits}+ digit number"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        shown = repr(value if len(value) <= 60 else value[:57] + "...")
        return f"string {shown}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def strict_bool(value: object, _: type) -> bool:
    if not isinstance(value, bool):
        raise FieldValueError(f"must be true or false, got {describe(value)}")
    return value


def _strict_int(value: object, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldValueError(f"must be an integer, got {describe(value)}")
    if not limits.INT64_MIN <= value <= limits.INT64_MAX:
        raise FieldValueError(f"must fit in 64 bits, got {describe(value)}")
    return value


def _strict_str(value: object, _: type) -> str:
    if not isinstance(value, str):
        hint = " (quote it in YAML)" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
        raise FieldValueError(f"must be a string, got {describe(value)}{hint}")
    if len(value) > limits.MAX_STRING:
        raise FieldValueError(f"must be at most {limits.MAX_STRING} characters, got {len(value)}")
    return value


_PERCENT = re.compile(limits.PERCENT_PATTERN)


def _int_or_percent(value: object, _: type) -> spec.IntOrPercent:
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= limits.INT_OR_PERCENT_MAX:
            return spec.IntOrPercent(value)
    elif isinstance(value, str):
        match = _PERCENT.fullmatch(value)
        if match:
            return spec.IntOrPercent.of_percent(int(match.group(1)))
    raise FieldValueError(
        f'must be an integer from 0 to {limits.INT_OR_PERCENT_MAX} or a percentage from "0%" to "100%", '
        f"got {describe(value)}"
    )


def _quantity(value: object, _: type) -> spec.Quantity:
    parsed = (
        spec.Quantity.parse(value)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and len(str(value)) <= 64
        else None
    )
    if parsed is None:
        raise FieldValueError(f'must be a Kubernetes quantity such as "128Mi", "500m" or 2, got {describe(value)}')
    return parsed


_DURATION = re.compile(limits.DURATION_PATTERN)
_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def duration_ms(value: object) -> int:
    """pauseDuration: milliseconds as an integer (the seed's 10000 = 10 s), or a string like "10s", "500ms"."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise FieldValueError(f"must not be negative, got {describe(value)}")
        return value
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match:
            unit = match.group(1) or "ms"
            return int(value.removesuffix(unit)) * _DURATION_UNITS_MS[unit]
    raise FieldValueError(
        f'must be milliseconds (e.g. 10000) or a duration like "10s", "500ms", "2m", got {describe(value)}'
    )


_GPUS = re.compile(limits.GPUS_PATTERN)


def gpus_text(value: object) -> str:
    """vfioConfig ``gpus``: the documented comma string ("0,1,2" or "all"), a YAML list ([0, 1], ["all"]) or
    one index as an integer (``--set vfioManager.vfioConfig[0].gpus=1`` gives Helm's integer 1).

    All become the comma string, so the rest of the operator sees one form."""
    if isinstance(value, str) and _GPUS.fullmatch(value):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 9999:
        return str(value)
    if isinstance(value, (list, tuple)) and value:
        parts = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
        joined = ",".join(p if isinstance(p, str) else "?" for p in parts)
        if len(joined) <= 1024 and _GPUS.fullmatch(joined) and ("all" not in parts or len(parts) == 1):
            return joined
    raise FieldValueError(
        f'must be "all", comma-separated GPU indexes like "0,1,2", one index like 1 or a list like [0, 1, 2], '
        f"got {describe(value)}"
    )


def enum_hook(enum_type: type[enum.Enum]) -> Callable[[object, type], enum.Enum]:
    allowed = [member.value for member in enum_type]

    def structure(value: object, _: type) -> enum.Enum:
        for member in enum_type:
            if member.value == value:
                return member
        raise FieldValueError(f"must be one of {', '.join(map(str, allowed))}; got {describe(value)}")

    return structure


def _str_mapping(value: object, _: type) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise FieldValueError(f"must be a mapping of strings, got {describe(value)}")
    bad = [k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        shown = ", ".join(describe(k) for k in bad[:5])
        raise FieldValueError(f"keys and values must be strings (quote them in YAML); not so at {shown}")
    return dict(value)


def _any_mapping(value: object, _: type) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FieldValueError(f"must be a mapping, got {describe(value)}")
    return dict(value)


def _is_variadic_tuple(t: object) -> bool:
    args = typing.get_args(t)
    return typing.get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis


def list_hook(conv: cattrs.Converter) -> Callable[[Any], Callable[[object, type], tuple[Any, ...]]]:
    """``tuple[X, ...]`` fields take a YAML list only: cattrs would otherwise iterate a string ("abc" → a, b, c)
    or a mapping (its keys). Element errors keep their index, like cattrs' own tuple hook."""

    def factory(t: Any) -> Callable[[object, type], tuple[Any, ...]]:
        element = typing.get_args(t)[0]

        def structure(value: object, _: type) -> tuple[Any, ...]:
            if not isinstance(value, (list, tuple)):
                raise FieldValueError(f"must be a list, got {describe(value)}")
            items: list[Any] = []
            errors: list[Exception] = []
            for index, item in enumerate(value):
                try:
                    items.append(conv.structure(item, element))
                except Exception as exc:
                    exc.__notes__ = [
                        *getattr(exc, "__notes__", []),
                        IterableValidationNote(f"index {index}", index, element),
                    ]
                    errors.append(exc)
            if errors:
                raise IterableValidationError(f"While structuring {t!r}", errors, t)
            return tuple(items)

        return structure

    return factory


# Per-attribute structure overrides where the attribute's type alone does not say enough.
_SPECIAL_STRUCTURE: dict[tuple[type, str], Callable[[object, type], object]] = {
    (spec.UpgradeStep, "pause_duration"): lambda v, _t: None if v is None else duration_ms(v),
    (spec.VfioConfigEntry, "gpus"): lambda v, _t: gpus_text(v),
}


def _limited(cl: type, name: str, hook: Callable[[object, Any], object]) -> Callable[[object, Any], object]:
    """``hook`` followed by the field's bounds from `metax_core.spec.limits` (range, items, length)."""
    bounds = limits.INT_RANGES.get((cl, name))
    max_items = limits.MAX_ITEMS.get((cl, name))
    max_length = limits.MAX_LENGTH.get((cl, name))

    def structure(value: object, t: Any) -> object:
        if max_items is not None and isinstance(value, (list, tuple)) and len(value) > max_items:
            raise FieldValueError(f"must list at most {max_items} items, got {len(value)}")
        result = hook(value, t)
        if bounds is not None and isinstance(result, int) and not bounds.minimum <= result <= bounds.maximum:
            raise FieldValueError(f"must be {bounds}, got {describe(result)}")
        if max_length is not None and isinstance(result, str) and len(result) > max_length:
            raise FieldValueError(f"must be at most {max_length} characters, got {len(result)}")
        return result

    return structure


def _build_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(bool, strict_bool)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(str, _strict_str)
    conv.register_structure_hook(spec.IntOrPercent, _int_or_percent)
    conv.register_unstructure_hook(spec.IntOrPercent, lambda v: str(v) if v.percent else v.value)
    conv.register_structure_hook(spec.Quantity, _quantity)
    conv.register_unstructure_hook(spec.Quantity, str)
    conv.register_structure_hook_func(lambda t: t == Mapping[str, str], _str_mapping)
    conv.register_structure_hook_func(lambda t: t == Mapping[str, Any], _any_mapping)
    conv.register_structure_hook_factory(_is_variadic_tuple, list_hook(conv))
    conv.register_structure_hook_factory(lambda t: isinstance(t, type) and issubclass(t, enum.Enum), enum_hook)

    def structure_factory(cl: type) -> Callable[[Mapping[str, Any], type], Any]:
        overrides: dict[str, Any] = {}
        for a in attrs.fields(attrs.resolve_types(cl)):
            hook = _SPECIAL_STRUCTURE.get((cl, a.name))
            if any((cl, a.name) in table for table in (limits.INT_RANGES, limits.MAX_ITEMS, limits.MAX_LENGTH)):
                field_type = a.type

                def default_hook(v: object, _t: Any, field_type: Any = field_type) -> object:
                    return conv.structure(v, field_type)

                hook = _limited(cl, a.name, hook or default_hook)
            overrides[a.name] = override(rename=camel_case(a.name), struct_hook=hook)
        inner: Callable[[Mapping[str, Any], Any], Any] = make_dict_structure_fn(
            cl, conv, _cattrs_forbid_extra_keys=True, **overrides
        )

        def structure(value: Any, t: type) -> Any:
            if not isinstance(value, Mapping):
                raise FieldValueError(f"must be a mapping, got {describe(value)}")
            bad = [k for k in value if not isinstance(k, str)]
            if bad:
                raise FieldValueError(f"keys must be strings (quote them in YAML); got {describe(bad[0])}")
            return inner(value, t)

        return structure

    def unstructure_factory(cl: type) -> Callable[[Any], dict[str, Any]]:
        renames: dict[str, Any] = {a.name: override(rename=camel_case(a.name)) for a in attrs.fields(cl)}
        return make_dict_unstructure_fn(cl, conv, **renames)

    conv.register_structure_hook_factory(attrs.has, structure_factory)
    conv.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    return conv


CONVERTER = _build_converter()


def _field_names(cl: type) -> list[str]:
    return [camel_case(a.name) for a in attrs.fields(cl)]


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not key or any(c in key for c in '.[]" \n'):
        return f"{path}[{json.dumps(key)}]"  # an empty or dotted key still names a place
    return f"{path}.{key}" if path else key


def _unknown_key_message(key: str, cl: type) -> str:
    allowed = _field_names(cl)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {close[0]!r}?"
    return f"unknown field; allowed fields here: {', '.join(allowed)}"


def _walk(exc: BaseException, path: str, out: list[FieldError]) -> None:
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        for sub in exc.exceptions:
            sub_path = path
            for note in getattr(sub, "__notes__", []):
                name = getattr(note, "name", None)
                index = getattr(note, "index", None)
                if isinstance(name, str):
                    sub_path = _join(path, camel_case(name))
                elif isinstance(index, int):
                    sub_path = _join(path, index)
            _walk(sub, sub_path, out)
    elif isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields):
            out.append(FieldError(_join(path, key), _unknown_key_message(key, exc.cl)))
    elif isinstance(exc, KeyError):
        out.append(FieldError(path, "required field is missing"))
    elif isinstance(exc, FieldValueError):
        out.append(FieldError(path, str(exc)))
    else:
        out.append(FieldError(path, f"invalid value ({exc})"))


def field_errors(exc: BaseException, path: str = "") -> list[FieldError]:
    """Every problem in a cattrs structuring error, as `FieldError`s with camelCase paths under ``path``."""
    errors: list[FieldError] = []
    _walk(exc, path, errors)
    return errors


def structure(document: object, cl: type[T], *, path: str = "") -> T:
    """Build a ``cl`` record from a document or raise `InvalidSpec` with every problem in it."""
    try:
        return CONVERTER.structure(document, cl)
    except (ClassValidationError, IterableValidationError, FieldValueError) as exc:
        raise InvalidSpec(field_errors(exc, path)) from exc


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def unstructure(record: object) -> Any:
    """The document form of a record: camelCase keys, every default filled in, unset (null) fields left out."""
    return _drop_nulls(CONVERTER.unstructure(record))
