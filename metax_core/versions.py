"""Version numbers: parsing, numeric ordering, and MXMACA version selection by prefix (R-MACA, §3.3.3).

Versions compare number by number (2.18 > 2.9, unlike strings). A ``METAX_MACA_VERSION`` request such as
``maca-2.18`` matches every installed version whose leading numbers are 2 and 18 (so ``maca-2.1`` does not
match 2.18: prefixes are whole numbers, not characters), and the newest match wins. ``maca`` and ``maca-``
are refused, and no match is an error, never a silent fallback.

Suffixes (docs/configuration.md, "Version ordering"): a suffix that starts with a pre-release word (``alpha``,
``beta``, ``rc``, ``pre``, ``dev``, ``a``, ``b``, or anything after ``~``) marks a pre-release, which ranks
BELOW the release with the same numbers (``2.18.0.3-rc1 < 2.18.0.3``); pre-releases compare part by part,
numbers numerically (``rc2 < rc10``). Any other suffix (a build or platform tag, ``-ubuntu18.04``) ranks
above the bare release and below the next number, and such tags compare as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from metax_core.errors import FieldError, InvalidSpec, MetaxError

MACA_PREFIX = "maca-"
ENV_VAR = "METAX_MACA_VERSION"
"""The MXMACA version a GPU workload's pod asks for (``maca-2.18``): container-edit and the DRA driver read it."""

_NUMBER = r"[0-9]{1,9}"
_VERSION = re.compile(rf"v?({_NUMBER}(?:\.{_NUMBER}){{0,15}})([-+~_][0-9A-Za-z.+~_-]{{0,127}})?")
_LEADING = re.compile(rf"({_NUMBER}(?:\.{_NUMBER}){{0,15}})(?:[-+~_]|\Z)")
_PRE_RELEASE = re.compile(r"(alpha|beta|rc|pre|dev|a|b)(?![a-z])", re.IGNORECASE)
_PART = re.compile(r"[0-9]+|[A-Za-z]+")


def suffix_rank(suffix: str) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    """How a suffix orders versions with equal numbers: pre-release (0) < release (1) < build tag (2)."""
    if not suffix:
        return (1, ())
    body = suffix[1:]
    if suffix[0] == "~" or _PRE_RELEASE.match(body):
        parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in _PART.findall(body))
        return (0, parts)
    return (2, ((1, 0, suffix),))


@attrs.frozen(order=True)
class Version:
    """A dotted version; ``suffix`` (``-rc1``, ``-ubuntu``) orders equal numbers (see the module docstring)."""

    numbers: tuple[int, ...]
    suffix: str = attrs.field(default="", order=suffix_rank)

    def __str__(self) -> str:
        return ".".join(map(str, self.numbers)) + self.suffix

    def startswith(self, prefix: tuple[int, ...]) -> bool:
        return self.numbers[: len(prefix)] == prefix


def parse(text: str) -> Version:
    """Parse ``2.18.0.3`` (optionally ``v``-prefixed, with a ``-suffix``); raise ValueError otherwise."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a version number: {text!r}")
    return Version(tuple(int(n) for n in match.group(1).split(".")), match.group(2) or "")


def try_parse(text: str) -> Version | None:
    try:
        return parse(text)
    except ValueError:
        return None


def version_of_tag(tag: str) -> Version | None:
    """The version an image tag starts with: ``2.18.0.3-ubuntu18.04-amd64`` → 2.18.0.3."""
    match = _LEADING.match(tag)
    return Version(tuple(int(n) for n in match.group(1).split("."))) if match else None


class NoMatchingVersion(MetaxError):
    """A valid request that no installed MXMACA version satisfies."""

    def __init__(self, request: str, available: Iterable[str]) -> None:
        self.request = request
        self.available = tuple(available)
        shown = ", ".join(self.available) if self.available else "none"
        super().__init__(f"no installed MXMACA version matches {request!r} (installed: {shown})")


def parse_request(request: str) -> tuple[int, ...]:
    """The number prefix a ``maca-X[.Y[.Z[.W]]]`` request asks for; InvalidSpec for anything else."""
    text = request.strip()
    if not text.startswith(MACA_PREFIX) or not text[len(MACA_PREFIX) :]:
        raise InvalidSpec(
            [FieldError(ENV_VAR, f'must look like "maca-2", "maca-2.18" or "maca-2.18.0.3", got {request!r}')]
        )
    numbers = text[len(MACA_PREFIX) :].split(".")
    if len(numbers) > 16 or not all(n.isascii() and n.isdigit() and len(n) <= 9 for n in numbers):
        raise InvalidSpec([FieldError(ENV_VAR, f"version part must be dot-separated numbers, got {request!r}")])
    return tuple(int(n) for n in numbers)


def resolve(request: str, available: Iterable[str]) -> Version:
    """The newest available version matching ``request``; ``available`` items may carry ``maca-``."""
    prefix = parse_request(request)
    offered = list(available)
    candidates = []
    for item in offered:
        bare = item[len(MACA_PREFIX) :] if item.startswith(MACA_PREFIX) else item
        version = try_parse(bare)
        if version is not None and version.startswith(prefix):
            candidates.append(version)
    if not candidates:
        raise NoMatchingVersion(request, offered)
    return max(candidates)
