"""Field ownership for the in-memory API server: server-side apply as far as the operator relies on it.

What it models (structured-merge-diff's rules, simplified):
- Every field is a path of map keys; maps are granular (``data.a``, ``metadata.labels.x``), lists and
  scalars are leaves (lists are atomic here; the real server merges some lists by key, e.g. containers by
  name: apply whole lists from one manager and the two agree), except `KEYED_LISTS`: ``status.conditions``
  (``listType=map``, key ``type``) is merged by its items' type, as the real server does for a Node's
  conditions (the kubelet's and the operator's ``MetaXGPUHealthy`` side by side).
- An apply by manager M sets the fields it names and takes ownership of them. A field owned by another
  manager with a different value is a conflict (HTTP 409) unless ``force``, which moves ownership to M.
  The same value makes ownership shared. Fields M applied before and omits now are removed, unless another
  manager still owns them.
- Any other write (create, update, merge patch) gives its manager the fields it changed and takes them away
  from everyone else, as the real server does for operation ``Update``.
- ``status`` is owned separately through the status subresource when the kind has one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from metax_core.errors import Conflict

Path = tuple[str, ...]
ManagerKey = tuple[str, str, str]
"""(manager, operation "Apply"|"Update", subresource "" or "status")."""
Managers = dict[ManagerKey, set[Path]]

IDENTITY: frozenset[Path] = frozenset(
    {
        ("apiVersion",),
        ("kind",),
        ("metadata", "name"),
        ("metadata", "namespace"),
        ("metadata", "uid"),
        ("metadata", "resourceVersion"),
        ("metadata", "generation"),
        ("metadata", "creationTimestamp"),
        ("metadata", "deletionTimestamp"),
        ("metadata", "managedFields"),
    }
)
_MISSING = object()
KEYED_LISTS: Mapping[str, Mapping[Path, str]] = {"Node": {("status", "conditions"): "type"}}
"""Lists the real server merges by a key (``+listType=map``) that are modelled here: kind → path → the key field
(a custom resource's lists are atomic unless its schema says otherwise, and ours does not)."""


def _keyed(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``obj`` with each keyed list as a map of its items (``k:<key>`` → item), so fields are per item."""
    if obj is None:
        return None
    out = copy.deepcopy(dict(obj))
    for path, key in KEYED_LISTS.get(str(obj.get("kind")), {}).items():
        items = value_at(out, path)
        if isinstance(items, list) and items and all(isinstance(i, Mapping) and key in i for i in items):
            put(out, path, {f"k:{i[key]}": i for i in items})
    return out


def _listed(obj: dict[str, Any], order: Mapping[str, Any] | None, kind: str) -> dict[str, Any]:
    """Back from `_keyed`: the items in the order ``order`` had them, new ones after."""
    for path, key in KEYED_LISTS.get(kind, {}).items():
        items = value_at(obj, path)
        if isinstance(items, dict):
            before = value_at(order, path) if order is not None else _MISSING
            known = (
                [f"k:{i[key]}" for i in before if isinstance(i, Mapping) and key in i]
                if isinstance(before, list)
                else []
            )
            ordered = [k for k in known if k in items] + sorted(k for k in items if k not in known)
            put(obj, path, [items[k] for k in ordered])
    return obj


def leaves(obj: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """Every field path of ``obj``: non-empty maps are walked into, anything else is a leaf."""
    out: set[Path] = set()
    for key, value in obj.items():
        path = (*prefix, key)
        if isinstance(value, Mapping) and value:
            out |= leaves(value, path)
        else:
            out.add(path)
    return out


def value_at(obj: Mapping[str, Any] | None, path: Path) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def put(obj: dict[str, Any], path: Path, value: Any) -> None:
    node = obj
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = copy.deepcopy(value)


def remove(obj: dict[str, Any], path: Path) -> None:
    """Delete ``path`` and the maps it leaves empty."""
    trail: list[tuple[dict[str, Any], str]] = []
    node: Any = obj
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return
        trail.append((node, part))
        node = node[part]
    for parent, key in reversed(trail):
        del parent[key]
        if parent or parent is obj:
            break  # otherwise the parent map is now empty: remove it from the grandparent too


def overlaps(a: Path, b: Path) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def _in_scope(path: Path, status_only: bool, has_status: bool) -> bool:
    if path in IDENTITY:
        return False
    if status_only:
        return path[0] == "status"
    return not (has_status and path[0] == "status")


def scoped_leaves(obj: Mapping[str, Any], *, status_only: bool, has_status: bool) -> set[Path]:
    return {p for p in leaves(obj) if _in_scope(p, status_only, has_status)}


def _dotted(path: Path) -> str:
    return "." + ".".join(path)


def _merges_into(applied: Any, current: Any) -> bool:
    """An empty map applied where a map with fields is: it names no field (``status: {}`` takes nothing over)."""
    return isinstance(applied, Mapping) and not applied and isinstance(current, Mapping) and bool(current)


def apply(
    current: Mapping[str, Any] | None,
    managers: Managers,
    applied: Mapping[str, Any],
    manager: str,
    *,
    force: bool,
    status_only: bool,
    has_status: bool,
    what: str,
) -> tuple[dict[str, Any], Managers]:
    """The object and ownership after ``manager`` applies ``applied``; `Conflict` listing every conflict."""
    original = current
    current, applied = _keyed(current), _keyed(applied) or {}
    key: ManagerKey = (manager, "Apply", "status" if status_only else "")
    fields = {
        p
        for p in scoped_leaves(applied, status_only=status_only, has_status=has_status)
        if not _merges_into(value_at(applied, p), value_at(current, p))
    }
    conflicts: list[tuple[ManagerKey, Path]] = []
    for other, owned in managers.items():
        if other == key:
            continue
        for theirs in owned:
            for ours in fields:
                if overlaps(ours, theirs):
                    longest = ours if len(ours) >= len(theirs) else theirs
                    if value_at(current, longest) != value_at(applied, longest):
                        conflicts.append((other, theirs))
    if conflicts and not force:
        lines = sorted({f'conflict with "{other[0]}": {_dotted(path)}' for other, path in conflicts})
        noun = "conflict" if len(lines) == 1 else "conflicts"
        raise Conflict("apply", what, f"Apply failed with {len(lines)} {noun}: " + "; ".join(lines), 409)
    result: dict[str, Any] = copy.deepcopy(dict(current)) if current else {}
    updated: Managers = {k: set(v) for k, v in managers.items()}
    for other, path in conflicts:
        updated[other].discard(path)
    for stale in managers.get(key, set()) - fields:
        still_owned = any(overlaps(stale, q) for k, owned in updated.items() if k != key for q in owned)
        if not still_owned and not any(overlaps(stale, f) for f in fields):
            remove(result, stale)
    for path in fields:
        put(result, path, value_at(applied, path))
    for path in scoped_leaves(applied, status_only=status_only, has_status=has_status) - fields:
        if value_at(result, path) is _MISSING:  # an empty map merged into one whose fields were all ours
            put(result, path, {})
    updated[key] = fields
    return _listed(result, original, str(applied.get("kind"))), {k: v for k, v in updated.items() if v}


def update(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any],
    managers: Managers,
    manager: str,
    *,
    status_only: bool,
    has_status: bool,
) -> Managers:
    """Ownership after a non-apply write by ``manager`` turned ``before`` into ``after``."""
    key: ManagerKey = (manager, "Update", "status" if status_only else "")
    before, after = _keyed(before), _keyed(after) or {}
    after_fields = scoped_leaves(after, status_only=status_only, has_status=has_status)
    changed = {p for p in after_fields if value_at(before, p) != value_at(after, p)}
    updated: Managers = {}
    for other, owned in managers.items():
        kept = {q for q in owned if value_at(after, q) is not _MISSING}
        if other != key:
            kept = {q for q in kept if not any(overlaps(q, c) for c in changed)}
        updated[other] = kept
    updated[key] = updated.get(key, set()) | changed
    return {k: v for k, v in updated.items() if v}


def fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def managed_fields(managers: Managers, api_version: str, stamp: Callable[[ManagerKey], str]) -> list[dict[str, Any]]:
    """``metadata.managedFields`` as the API server renders it."""
    entries = []
    for key in sorted(managers):
        manager, operation, subresource = key
        entry: dict[str, Any] = {
            "manager": manager,
            "operation": operation,
            "apiVersion": api_version,
            "time": stamp(key),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(managers[key]),
        }
        if subresource:
            entry["subresource"] = subresource
        entries.append(entry)
    return entries
