"""Agent settings from environment variables, through one cattrs converter.

Why one converter: every agent reads the same kinds of values (seconds, flags, counts, host paths, enums,
comma lists), and the DaemonSet the operator renders (`metax_core.cluster.workloads`) sets them as strings.
Each settings class is a frozen attrs class whose fields name their variable in metadata
(``attrs.field(metadata=env(agent_env.HEALTHY_INTERVAL.name))``); `load` structures the environment into it and
turns every failure into a `FieldError` naming the variable and what it allows, all problems in one
`InvalidSpec`, so an agent with a misread setting stops at start with a clear message instead of running.
"""

from __future__ import annotations

import enum
import math
import pathlib
import types
import typing
from collections.abc import Mapping
from typing import Any, NewType, TypeVar

import attrs
import cattrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.node import readiness
from metax_core.wire import agent_env

T = TypeVar("T")

ENV_KEY = "env"

Seconds = NewType("Seconds", float)
"""A duration in seconds, >= 0."""
HostPath = NewType("HostPath", str)
"""An absolute path on the host (taken under the agent's host root)."""
PositiveInt = NewType("PositiveInt", int)
"""A whole number >= 1 (a port, a count of days)."""
Port = NewType("Port", int)
"""A TCP port, 0 to 65535 (0: any free one)."""
Interval = NewType("Interval", float)
"""A duration in seconds, > 0 (a period: zero would spin)."""
Names = NewType("Names", tuple[str, ...])
"""A comma-separated list: ``"a, b,c"`` → ``("a", "b", "c")`` without blanks or repeats."""

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def env(name: str, help: str = "") -> dict[str, str]:
    """Field metadata: this field comes from environment variable ``name``."""
    return {ENV_KEY: name, "help": help}


def variable(field: attrs.Attribute[Any]) -> str | None:
    return field.metadata.get(ENV_KEY)


def _seconds(text: object, _: object) -> float:
    try:
        number = float(str(text))
    except ValueError:
        number = math.nan
    if math.isnan(number) or number < 0 or math.isinf(number):
        raise ValueError(f"must be a number of seconds >= 0, got {text!r}")
    return number


def _bool(text: object, _: object) -> bool:
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def _positive_int(text: object, _: object) -> int:
    word = str(text).strip()
    if not word.isdigit() or int(word) < 1:
        raise ValueError(f"must be a positive integer, got {text!r}")
    return int(word)


def _port(text: object, _: object) -> int:
    word = str(text).strip()
    if not word.isdigit() or int(word) > 65535:
        raise ValueError(f"must be a port number from 0 to 65535, got {text!r}")
    return int(word)


def _interval(text: object, _: object) -> float:
    number = _seconds(text, _)
    if number <= 0:
        raise ValueError(f"must be a number of seconds > 0, got {text!r}")
    return number


def _int(text: object, _: object) -> int:
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    word = str(text).strip()
    if not word.lstrip("-").isdigit():
        raise ValueError(f"must be an integer, got {text!r}")
    return int(word)


def _host_path(text: object, _: object) -> str:
    word = str(text).strip()
    if not word.startswith("/"):
        raise ValueError(f"must be an absolute host path, got {text!r}")
    return word


def _names(text: object, _: object) -> tuple[str, ...]:
    if isinstance(text, (tuple, list)):
        return tuple(str(t) for t in text)
    return tuple(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))


def _str(text: object, _: object) -> str:
    word = str(text).strip()
    if not word:
        raise ValueError("must not be empty")
    return word


def _enum(text: object, cls: type[enum.Enum]) -> enum.Enum:
    try:
        return cls(str(text).strip())
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"must be one of {allowed}, got {text!r}") from None


def _optional(text: object, cls: Any) -> object:
    if text is None or str(text).strip() == "":
        return None
    inner = next(a for a in typing.get_args(cls) if a is not type(None))
    return CONVERTER.structure(text, inner)


def _is_optional(t: Any) -> bool:
    origin: Any = typing.get_origin(t)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(t)


def _make_converter() -> cattrs.Converter:
    c = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    c.register_structure_hook(Seconds, _seconds)
    c.register_structure_hook(float, _seconds)
    c.register_structure_hook(bool, _bool)
    c.register_structure_hook(int, _int)
    c.register_structure_hook(PositiveInt, _positive_int)
    c.register_structure_hook(Port, _port)
    c.register_structure_hook(Interval, _interval)
    c.register_structure_hook(str, _str)
    c.register_structure_hook(HostPath, _host_path)
    c.register_structure_hook(Names, _names)
    c.register_structure_hook(pathlib.Path, lambda text, _: pathlib.Path(str(text)))
    c.register_structure_hook_func(lambda t: isinstance(t, type) and issubclass(t, enum.Enum), _enum)
    c.register_structure_hook_func(_is_optional, _optional)
    return c


CONVERTER = _make_converter()
"""The one converter every agent's settings go through."""


def _leaf_errors(exc: BaseException, cls: type[Any], path: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(attribute name, message) for every failure inside a cattrs validation ExceptionGroup."""
    found: list[tuple[str, str]] = []
    if isinstance(exc, cattrs.ClassValidationError):
        for inner in exc.exceptions:
            name = next(
                (n.name for n in getattr(inner, "__notes__", []) if isinstance(n, cattrs.AttributeValidationNote)),
                None,
            )
            found += _leaf_errors(inner, cls, (*path, name) if name else path)
        return found
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return [(k, "unknown setting") for k in sorted(exc.extra_fields)]
    message = str(exc) if isinstance(exc, ValueError) else f"invalid value ({exc})"
    if isinstance(exc, KeyError):
        message = "must be set"
    return [(path[0] if path else "?", message)]


def load(cls: type[T], environ: Mapping[str, str], **fixed: object) -> T:
    """Structure ``cls`` from the variables its fields name; ``fixed`` values bypass the environment.

    Raises InvalidSpec with one FieldError per bad or missing variable (the variable's name is the path).
    """
    fields = attrs.fields(cls)  # type: ignore[arg-type]
    raw: dict[str, object] = dict(fixed)
    by_attr: dict[str, str] = {}
    for field in fields:
        name = variable(field)
        if name is None:
            continue
        by_attr[field.name] = name
        if name in environ and field.name not in fixed:
            raw[field.name] = environ[name]
    try:
        return CONVERTER.structure(raw, cls)
    except cattrs.BaseValidationError as exc:
        errors = [FieldError(by_attr.get(attr, attr), message) for attr, message in _leaf_errors(exc, cls)]
        raise InvalidSpec(errors) from exc


def render_env(settings: object) -> dict[str, str]:
    """The environment that `load` reads back into ``settings`` (for tests, the dev CLI and the demo)."""
    out: dict[str, str] = {}
    for field in attrs.fields(type(settings)):  # type: ignore[arg-type]
        name = variable(field)
        value = getattr(settings, field.name)
        if name is None or value is None:
            continue
        if isinstance(value, enum.Enum):
            out[name] = str(value.value)
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, tuple):
            out[name] = ",".join(value)
        else:
            out[name] = str(value)
    return out


Components = NewType("Components", tuple[str, ...])
"""Readiness component names (``METAX_REQUIRED_COMPONENTS``), each a DNS label."""


def _components(text: object, _: object) -> tuple[str, ...]:
    try:
        return readiness.parse_required(",".join(text) if isinstance(text, (tuple, list)) else str(text))
    except InvalidSpec as exc:
        raise ValueError("; ".join(e.message for e in exc.errors)) from None


CONVERTER.register_structure_hook(Components, _components)


@attrs.frozen(kw_only=True)
class NodeAgentSettings:
    """What every node agent reads: its node, the host root, its namespace, probe file and loop pace."""

    node_name: str = attrs.field(metadata=env(agent_env.NODE_NAME, "the node this agent runs on (downward API)"))
    host_root: pathlib.Path = attrs.field(default=pathlib.Path("/"), metadata=env(agent_env.HOST_ROOT))
    """The host's root as the container sees it; every host path is taken under it."""
    namespace: str = attrs.field(default="metax-operator", metadata=env(agent_env.NAMESPACE))
    """Where the operator's ConfigMaps live (downward API: the pod's namespace)."""
    probe_file: str | None = attrs.field(default=None, metadata=env(agent_env.PROBE_FILE))
    resync: Seconds = attrs.field(default=Seconds(300.0), metadata=env(agent_env.RESYNC))
    """Seconds between full re-reads of the Node and ConfigMaps when no watch event came."""
    tick: Seconds = attrs.field(default=Seconds(1.0), metadata=env(agent_env.TICK))
    required_components: Components = attrs.field(default=Components(()), metadata=env(readiness.REQUIRED_ENV))
    log_level: str = attrs.field(default="INFO", metadata=env(agent_env.LOG_LEVEL))

    def host_path(self, path: str) -> pathlib.Path:
        return self.host_root / path.lstrip("/")
