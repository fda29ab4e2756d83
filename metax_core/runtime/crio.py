"""CRI-O's drop-in for the ``metax`` runtime handler (C4): one file we own in ``/etc/crio/crio.conf.d/``.

CRI-O reads ``crio.conf`` first, then every file of ``crio.conf.d`` in lexical order, a later file's option
winning (crio.conf.d(5)), so the drop-in holds only ``[crio.runtime.runtimes.metax]``; no file of the
administrator's is edited, and uninstall removes ours. CRI-O has CDI on (from 1.23). The handler is not the
default (``default_runtime`` is not touched): a RuntimeClass ``metax`` selects it.

What the agent asks CRI-O, read here (the formats are CRI-O's, TOML both):

* the dry run, ``crio --config <crio.conf> --config-dir <crio.conf.d> config``: CRI-O loads the files as the
  daemon would, validates them (``Validate`` without the start-time side effects) and prints the effective
  configuration, or exits non-zero with the reason (`checked`);
* the running daemon's word, ``GET /config`` on its socket (what ``crio status config`` prints): the
  configuration it runs with (`handler_loaded`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from metax_core.errors import FieldError, InvalidSpec
from metax_core.runtime import detect, handler

CONFIG = "/etc/crio/crio.conf"
DROPIN_DIR = "/etc/crio/crio.conf.d"
DROPIN_NAME = "99-metax.conf"
DROPIN = f"{DROPIN_DIR}/{DROPIN_NAME}"
HEADER = (
    "# Written by the MetaX GPU operator's container-runtime agent (runtime handler 'metax'); uninstall removes it.\n"
)
MIN_VERSION = (1, 23)
"""The oldest CRI-O configured: Kubernetes 1.23's (R-COMPAT; CRI-O's minor follows Kubernetes'), CDI on."""


def dropin_path(dropin_dir: str = DROPIN_DIR) -> str:
    return f"{dropin_dir.rstrip('/')}/{DROPIN_NAME}"


def check_version(version: detect.Version) -> None:
    if version[:2] < MIN_VERSION:
        text = ".".join(map(str, version))
        oldest = ".".join(map(str, MIN_VERSION))
        raise InvalidSpec([FieldError("crio", f"version {text} is too old; {oldest} or later is supported")])


def dropin(wrapper: str, runtime_root: str = "/run/runc") -> str:
    """The drop-in's whole text: always the same for the same wrapper (configuring twice writes nothing)."""
    table = {"runtime_path": wrapper, "runtime_type": "oci", "runtime_root": runtime_root}
    return HEADER + tomlkit.dumps({"crio": {"runtime": {"runtimes": {handler.RUNTIME_HANDLER: table}}}})


def parse(text: str, where: str) -> Mapping[str, Any]:
    """A CRI-O configuration's text (a file, ``crio config``'s output, ``GET /config``'s body) as a mapping."""
    try:
        return tomlkit.parse(text).unwrap()
    except TOMLKitError as exc:
        raise InvalidSpec([FieldError(where, f"is not TOML: {exc}")]) from None


def handler_entry(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``crio.runtime.runtimes.metax`` of a parsed CRI-O config (a drop-in, or the running daemon's ``/config``)."""
    node: Any = config
    for key in ("crio", "runtime", "runtimes", handler.RUNTIME_HANDLER):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, Mapping) else None


def handler_loaded(config: Mapping[str, Any], wrapper: str, who: str = "the running crio") -> tuple[bool, str]:
    """Whether a CRI-O configuration has runtime handler ``metax`` running ``wrapper``, and why not."""
    entry = handler_entry(config)
    name = handler.RUNTIME_HANDLER
    if entry is None:
        return False, f"{who} has no runtime handler {name!r}"
    if entry.get("runtime_path") != wrapper:
        return False, f"{who}'s runtime handler {name!r} runs {entry.get('runtime_path')!r}, not {wrapper!r}"
    return True, f"crio runtime handler {name!r} loaded ({wrapper})"


def checked(output: str, wrapper: str) -> tuple[bool, str]:
    """The verdict on ``crio config``'s output (the effective configuration of the files on disk): it must
    declare the handler running the wrapper (a later drop-in of someone else's could override ours)."""
    try:
        config = parse(output, "crio config")
    except InvalidSpec as exc:
        return False, str(exc)
    return handler_loaded(config, wrapper, "the configuration on disk")
