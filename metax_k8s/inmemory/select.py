"""Label and field selectors, and label syntax, as kube-apiserver understands them (for the in-memory server).

Why exact: the operator and the node agents select pods by node (``spec.nodeName=...``) and workloads by
labels; a fake that accepted a selector the real server refuses (or matched differently) would let a bug
through every fast test. Grammar: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``,
``!k``, comma-separated; field selectors only ``=``, ``==``, ``!=`` on the fields each kind supports
(others are refused with the real server's words: ``"x" is not a known field selector``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core.errors import ClusterError

_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(rf"^{_NAME}$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

Matcher = Callable[[Mapping[str, Any]], bool]


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label (or annotation) key, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"prefix part of {key!r} must be a DNS subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        return (
            f"name part of {key!r} must be at most 63 characters of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def label_value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"label value {value!r} must be a string"
    if len(value) > 63 or (value and not _NAME_RE.match(value)):
        return (
            f"label value {value!r} must be at most 63 characters of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def dns_subdomain_problem(name: str) -> str | None:
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return f"{name!r} must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'), at most 253 characters"
    return None


def path_segment_problem(name: str) -> str | None:
    """kube-apiserver's rule for RBAC object names (``system:node``): any path segment, so ':' is allowed."""
    if not name or name in (".", "..") or "/" in name or "%" in name:
        return f"{name!r} may not be empty, '.' or '..', and may not contain '/' or '%'"
    return None


def _bad(selector: str, why: str) -> ClusterError:
    return ClusterError("list", "selector", f"unable to parse requirement in {selector!r}: {why}", 400)


def _split(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


@attrs.frozen
class Requirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator == "in":
            return present and value in self.values
        if self.operator == "notin":
            return not present or value not in self.values
        if self.operator == "=":
            return present and value in self.values
        return not present or value not in self.values  # "!="


_SET = re.compile(r"^(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ = re.compile(r"^(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")


def parse_label_selector(selector: str | None) -> Matcher:
    """A predicate on objects; `ClusterError` (400) when the selector is malformed."""
    requirements: list[Requirement] = []
    for part in _split(selector or ""):
        if match := _SET.match(part):
            values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
            requirements.append(Requirement(match["key"], match["op"], values))
        elif match := _EQ.match(part):
            op = "!=" if match["op"] == "!=" else "="
            requirements.append(Requirement(match["key"], op, frozenset([match["value"]])))
        elif part.startswith("!") and _NAME_RE.match(part[1:].split("/")[-1]):
            requirements.append(Requirement(part[1:].strip(), "!exists"))
        elif re.match(r"^[^\s!=(),]+$", part):
            requirements.append(Requirement(part, "exists"))
        else:
            raise _bad(selector or "", f"{part!r} is not a requirement")
    for requirement in requirements:
        problem = label_key_problem(requirement.key)
        if problem:
            raise _bad(selector or "", problem)

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in requirements)

    return matches


def _field(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


EXTRA_FIELDS: dict[str, frozenset[str]] = {
    "Pod": frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
        }
    ),
    "Node": frozenset({"spec.unschedulable"}),
    "Event": frozenset({"reason", "type", "regarding.kind", "regarding.name", "regarding.namespace", "regarding.uid"}),
    "Secret": frozenset({"type"}),
    "Namespace": frozenset({"status.phase"}),
    "ResourceSlice": frozenset({"spec.nodeName", "spec.driver"}),
}


def parse_field_selector(selector: str | None, kind: str) -> Matcher:
    """A predicate on objects; `ClusterError` (400) for malformed selectors and unsupported fields."""
    supported = {"metadata.name", "metadata.namespace"} | EXTRA_FIELDS.get(kind, frozenset())
    terms: list[tuple[str, bool, str]] = []
    for part in _split(selector or ""):
        match = re.match(r"^(?P<field>[^\s!=]+)\s*(?P<op>==|=|!=)\s*(?P<value>.*)$", part)
        if not match:
            raise ClusterError("list", "field selector", f"invalid field selector {part!r}", 400)
        if match["field"] not in supported:
            known = ", ".join(f'"{f}"' for f in sorted(supported))
            raise ClusterError(
                "list", "field selector", f'"{match["field"]}" is not a known field selector: only {known}', 400
            )
        terms.append((match["field"], match["op"] != "!=", match["value"].strip()))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((_field(obj, field) == value) is equal for field, equal, value in terms)

    return matches
