"""What a submitted document is: a whole ClusterOperator object or the chart's values, and where its spec is.

Why a module of its own: `metax_core.spec.validation` checks a spec; before that, the object around it is checked
as the API server checks it (known top-level fields, ObjectMeta, the one name the operator reconciles, R-WEBHOOK),
and the values form is read as Helm reads it (``--set-file tolerations=…``, ``--set-string``). The CLI's ``diff``
takes the spec part the same way.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec import chart_values, converter, names, text
from metax_core.spec import model as spec

_ENVELOPE = ("apiVersion", "kind", "metadata", "spec", "status")
_METADATA = (
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields", "selfLink",
)  # fmt: skip
TOLERATIONS_KEY = "tolerations"


def spec_document(document: object) -> Mapping[str, Any]:
    """The spec part of ``document``: a ClusterOperator object's ``spec``, or the mapping itself (values).

    The object's envelope is checked as the API server would: known top-level fields only, ``metadata`` a
    mapping of ObjectMeta fields with string labels and annotations, the one name the operator reconciles.
    In the values form, ``tolerations`` may be the YAML/JSON text of the list (``--set-file tolerations=…``),
    and a boolean or integer field may be the string Helm's ``--set-string`` makes of it (`chart_values`).
    """
    if not isinstance(document, Mapping):
        raise InvalidSpec([FieldError("", "the document must be a mapping (a ClusterOperator or a spec)")])
    bad_keys = [k for k in document if not isinstance(k, str)]
    if bad_keys:
        raise InvalidSpec([FieldError("", f"keys must be strings; got {converter.describe(bad_keys[0])}")])
    if "kind" not in document and "apiVersion" not in document:
        return _values_document(document)
    errors = []
    expected_api = f"{spec.API_GROUP}/{spec.API_VERSION}"
    if document.get("kind") != spec.KIND:
        errors.append(FieldError("kind", f"must be {spec.KIND}, got {converter.describe(document.get('kind'))}"))
    if document.get("apiVersion") != expected_api:
        errors.append(
            FieldError("apiVersion", f"must be {expected_api}, got {converter.describe(document.get('apiVersion'))}")
        )
    for key in document:
        if key not in _ENVELOPE:
            errors.append(FieldError(key, f"unknown field; allowed at the top: {', '.join(_ENVELOPE)}"))
    errors += _metadata_errors(document.get("metadata"))
    status = document.get("status")
    if status is not None and not isinstance(status, Mapping):
        errors.append(FieldError("status", f"must be a mapping, got {converter.describe(status)}"))
    body = document.get("spec", {})
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        errors.append(FieldError("spec", f"must be a mapping, got {converter.describe(body)}"))
    if errors:
        raise InvalidSpec(errors)
    return typing.cast(Mapping[str, Any], body)


_NAME_REQUIRED = FieldError(
    "metadata.name", f"is required and must be {spec.OBJECT_NAME!r}: the operator reconciles only that object"
)


def _metadata_errors(metadata: object) -> list[FieldError]:
    """ObjectMeta as the API server checks it, and the one name (a ``generateName`` alone would make another)."""
    if metadata is None:
        return [_NAME_REQUIRED]
    if not isinstance(metadata, Mapping):
        return [FieldError("metadata", f"must be a mapping, got {converter.describe(metadata)}")]
    errors = []
    for key, value in metadata.items():
        if not isinstance(key, str) or key not in _METADATA:
            errors.append(FieldError(f"metadata.{key}", "unknown field of ObjectMeta"))
        elif key in ("labels", "annotations"):
            if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                errors.append(FieldError(f"metadata.{key}", "must be a mapping of strings to strings"))
            elif key == "labels":
                for k, v in value.items():
                    problem = names.label_key_problem(k) or names.label_value_problem(v)
                    if problem:
                        errors.append(FieldError(f"metadata.labels.{k}", problem))
    name = metadata.get("name")
    if name is None or name == "":
        errors.append(_NAME_REQUIRED)
    elif name != spec.OBJECT_NAME:
        errors.append(
            FieldError("metadata.name", f"must be {spec.OBJECT_NAME!r}: the operator reconciles only that object")
        )
    return errors


def _values_document(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """Chart values: a ``tolerations`` string (Helm's ``--set-file``, §3.2.4) is read as the YAML/JSON list,
    and strings read as Helm's ``--set`` reads them where the field is a boolean or an integer (`chart_values`)."""
    raw = document.get(TOLERATIONS_KEY)
    if isinstance(raw, str):
        try:
            tolerations = text.load_value(raw, TOLERATIONS_KEY)
        except text.TextError as exc:
            message = exc.message if exc.line is None else f"line {exc.line}, column {exc.column}: {exc.message}"
            problem = f"is a string but not a YAML/JSON list: {message}"
            raise InvalidSpec([FieldError(TOLERATIONS_KEY, problem)]) from exc
        document = {**document, TOLERATIONS_KEY: tolerations}
    return chart_values.canonical(document)
