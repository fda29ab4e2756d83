"""Compute resources in the spec: Kubernetes quantities, and a container's requests and limits (issue 38 item 5).

Why a module of its own: ``resources`` is one field on every component (`metax_core.spec.model`), and a quantity is
a value type with its own syntax (``128Mi``, ``0.5``, ``500m``, ``1e3``) and order (``1Gi`` > ``1000Mi``), read by the
converter, the CRD's schema and the render alike. The syntax is the API server's own (apimachinery
``resource.Quantity``: a signed decimal, then a binary suffix ``Ki Mi Gi Ti Pi Ei``, a decimal suffix ``n u m k M
G T P E`` or an exponent ``e3``/``E-3``); an int or a float in YAML means the same number.
"""

from __future__ import annotations

import re
from fractions import Fraction

import attrs

PATTERN = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?"
"""A Kubernetes quantity (apimachinery's serialization format); the CRD's schema carries it too."""
_QUANTITY = re.compile(PATTERN)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@attrs.frozen
class Quantity:
    """A Kubernetes resource quantity, kept as written; compared by value."""

    text: str = attrs.field(eq=False, order=False)
    value: Fraction = attrs.field(repr=False)

    @classmethod
    def parse(cls, written: str | int | float) -> Quantity | None:
        """The quantity ``written`` says, or None when it is not one (negative values included: never a resource)."""
        text = str(written).strip()
        match = _QUANTITY.fullmatch(text)
        if match is None or text.startswith("-"):
            return None
        number, suffix = match.group(1), match.group(3) or ""
        value = Fraction(number)
        if suffix in _BINARY:
            value *= 1024 ** _BINARY[suffix]
        elif suffix in _DECIMAL:
            value *= Fraction(10) ** _DECIMAL[suffix]
        else:
            value *= Fraction(10) ** int(suffix[1:])
        return cls(text, value)

    def __str__(self) -> str:
        return self.text

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        return self.value <= other.value


@attrs.frozen
class ResourceList:
    """The CPU and memory of a container's requests or limits (core/v1 ResourceList, these two keys)."""

    cpu: Quantity | None = None
    memory: Quantity | None = None

    def manifest(self) -> dict[str, str]:
        return {k: str(v) for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v is not None}

    def merged(self, over: ResourceList | None) -> ResourceList:
        """``over``'s values where it sets them, else these."""
        if over is None:
            return self
        return ResourceList(over.cpu or self.cpu, over.memory or self.memory)


@attrs.frozen
class Resources:
    """A container's compute resources (core/v1 ResourceRequirements: requests and limits of CPU and memory)."""

    requests: ResourceList | None = None
    limits: ResourceList | None = None

    def over(self, defaults: Resources) -> Resources:
        """These resources over the component's ``defaults``: each value set here wins; a request set above the
        default limit (and no limit set) raises that limit to the request, so the pod stays valid."""
        requests = (defaults.requests or ResourceList()).merged(self.requests)
        limits = (defaults.limits or ResourceList()).merged(self.limits)
        for key in ("cpu", "memory"):
            wanted, limit = getattr(requests, key), getattr(limits, key)
            explicit = self.limits is not None and getattr(self.limits, key) is not None
            if wanted is not None and limit is not None and limit < wanted and not explicit:
                limits = attrs.evolve(limits, **{key: wanted})
        return Resources(requests, limits)

    def manifest(self) -> dict[str, dict[str, str]]:
        out = {}
        for key, values in (("requests", self.requests), ("limits", self.limits)):
            rendered = values.manifest() if values is not None else {}
            if rendered:
                out[key] = rendered
        return out


def memory(mib: int) -> Quantity:
    """``<mib>Mi`` (the catalogue's defaults)."""
    parsed = Quantity.parse(f"{mib}Mi")
    assert parsed is not None
    return parsed


def cpu(millicores: int) -> Quantity:
    parsed = Quantity.parse(f"{millicores}m")
    assert parsed is not None
    return parsed
