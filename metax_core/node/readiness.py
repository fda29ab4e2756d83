"""The readiness signal node agents exchange, and the rule "may this node advertise GPUs?" (R-READY).

§3.2.11: a node has allocatable ``metax-tech.com/gpu`` only when every component it depends on works on
that node. Each node agent (gpu-label, container-runtime, driver, maca, ...) publishes one
`ComponentReadiness` for its component; gpu-device reads them all and asks `decide` whether the components
the operator lists as required are ready. A signal may carry the generation of the ClusterOperator spec it
acted on and the version it installed, so the operator can tell a stale "ready" from a current one.

The document form (`to_document` / `from_document`) is what the file adapter writes, one JSON file per
component under ``<root>/run/metax/ready/<component>.json``::

    {"component": "driver", "ready": true, "reason": "metax 2.18.0 loaded",
     "observedGeneration": 3, "version": "2.18.0", "updatedAt": "2024-05-01T10:00:00+00:00"}
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.wire import agent_env, host

READY_DIR = host.relative(host.READINESS_DIR)
"""Where the signals live, relative to the host root."""
REQUIRED_ENV = agent_env.REQUIRED_COMPONENTS

_COMPONENT = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")


@attrs.frozen
class ComponentReadiness:
    """One component's word on whether it works on this node."""

    component: str
    ready: bool
    reason: str = ""
    observed_generation: int | None = None
    version: str | None = None
    updated_at: datetime.datetime | None = None
    sequence: int | None = None
    """Changes with every write of the signal, so a reader can tell two writes of the same words apart
    (gpu-device's inventory read is consistent only when the signals before and after it are the same write)."""


@attrs.frozen
class AdvertiseDecision:
    """Whether gpu-device may advertise devices, and if not, a reason an administrator can act on."""

    may_advertise: bool
    missing: tuple[str, ...] = ()
    not_ready: tuple[ComponentReadiness, ...] = ()
    stale: tuple[str, ...] = ()
    reason: str = ""


def check_component(name: str, path: str = "component") -> None:
    """Raise InvalidSpec unless ``name`` is a DNS label (it becomes a file name)."""
    if not _COMPONENT.match(name):
        raise InvalidSpec([FieldError(path, f"{name!r} must be a lowercase DNS label such as 'container-runtime'")])


def parse_required(text: str) -> tuple[str, ...]:
    """``"gpu-label, container-runtime,maca"`` → the names, in order, without blanks or repeats."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    errors: list[FieldError] = []
    for i, n in enumerate(names):
        try:
            check_component(n, f"{REQUIRED_ENV}[{i}]")
        except InvalidSpec as exc:
            errors.extend(exc.errors)
    if errors:
        raise InvalidSpec(errors)
    return names


def decide(
    required: Sequence[str],
    signals: Mapping[str, ComponentReadiness],
    *,
    now: datetime.datetime | None = None,
    max_age: datetime.timedelta | None = None,
) -> AdvertiseDecision:
    """May the node advertise? Only when every required component has a signal that says ready.

    With ``now`` and ``max_age``, a signal older than ``max_age`` (or without ``updatedAt``) counts as not
    ready: that catches an agent that died without withdrawing its "ready".
    """
    missing = tuple(c for c in required if c not in signals)
    not_ready = tuple(signals[c] for c in required if c in signals and not signals[c].ready)
    stale: tuple[str, ...] = ()
    if now is not None and max_age is not None:
        stale = tuple(
            c for c in required if c in signals and signals[c].ready and _older(signals[c].updated_at, now, max_age)
        )
    parts = []
    if missing:
        parts.append("no readiness signal from " + ", ".join(missing))
    parts += [f"{s.component} not ready: {s.reason or 'no reason given'}" for s in not_ready]
    if stale:
        parts.append(f"readiness older than {max_age} from " + ", ".join(stale))
    ok = not parts
    return AdvertiseDecision(
        ok, missing, not_ready, stale, "; ".join(parts) if parts else "all required components ready"
    )


def _older(stamp: datetime.datetime | None, now: datetime.datetime, max_age: datetime.timedelta) -> bool:
    return stamp is None or now - stamp > max_age


def to_document(signal: ComponentReadiness) -> dict[str, Any]:
    doc: dict[str, Any] = {"component": signal.component, "ready": signal.ready, "reason": signal.reason}
    if signal.observed_generation is not None:
        doc["observedGeneration"] = signal.observed_generation
    if signal.version is not None:
        doc["version"] = signal.version
    if signal.updated_at is not None:
        doc["updatedAt"] = signal.updated_at.isoformat()
    if signal.sequence is not None:
        doc["sequence"] = signal.sequence
    return doc


_FIELDS = {"component", "ready", "reason", "observedGeneration", "version", "updatedAt", "sequence"}


def from_document(doc: Any, *, path: str = "$") -> ComponentReadiness:
    """Parse a signal document, collecting every problem into one InvalidSpec."""
    if not isinstance(doc, Mapping):
        raise InvalidSpec([FieldError(path, "must be an object")])
    errors = [FieldError(f"{path}.{k}", "unknown field") for k in sorted(set(doc) - _FIELDS)]

    def typed(key: str, types: tuple[type, ...], required: bool = False) -> Any:
        if key not in doc:
            if required:
                errors.append(FieldError(f"{path}.{key}", "required field missing"))
            return None
        value = doc[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            errors.append(FieldError(f"{path}.{key}", f"must be {' or '.join(t.__name__ for t in types)}"))
            return None
        return value

    component = typed("component", (str,), required=True)
    if component is not None and not _COMPONENT.match(component):
        errors.append(FieldError(f"{path}.component", f"{component!r} must be a lowercase DNS label"))
    ready = typed("ready", (bool,), required=True)
    reason = typed("reason", (str,)) or ""
    generation = typed("observedGeneration", (int,))
    version = typed("version", (str,))
    sequence = typed("sequence", (int,))
    stamp_text = typed("updatedAt", (str,))
    stamp = None
    if stamp_text is not None:
        try:
            stamp = datetime.datetime.fromisoformat(stamp_text)
        except ValueError:
            errors.append(FieldError(f"{path}.updatedAt", f"{stamp_text!r} is not an ISO 8601 time"))
        else:
            if stamp.tzinfo is None:
                errors.append(FieldError(f"{path}.updatedAt", "must carry a UTC offset"))
                stamp = None
    if errors:
        raise InvalidSpec(errors)
    return ComponentReadiness(component, bool(ready), reason, generation, version, stamp, sequence)
