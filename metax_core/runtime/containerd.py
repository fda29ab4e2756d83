"""containerd's configuration for the ``metax`` runtime handler: an owned drop-in plus a recorded root edit.

What we write (C4, docs/container-runtime.md):

* **the drop-in** ``<root dir>/conf.d/99-metax.toml``, ours entirely, at the root file's ``version``. It
  declares the runtime handler ``metax``: a copy of the node's default runtime (its ``runtime_type`` and
  options, so ``SystemdCgroup`` and the runc root stay as the kubelet expects) whose ``BinaryName`` is the
  wrapper. On config version 2 (containerd 1.x) an imported plugin section *replaces* the root's whole
  section, so the drop-in carries the root's entire CRI section (a copy, re-made whenever the root changes)
  plus the handler, and on 1.7 ``enable_cdi = true``; on 3 and 4 (2.x deep-merges) it carries the handler only.
* **the root edit**: only ``imports`` gains the drop-in's path, and only when no existing import (a glob such
  as ``conf.d/*.toml``) already covers it. An absent root file is created. Edits go through tomlkit, so
  comments, order and formatting of everything else are kept.

The handler is **not** the default runtime: a RuntimeClass ``metax`` (handler ``metax``) selects it, so a
container that asks for no GPU never passes through our wrapper, and uninstalling cannot leave the node's
default runtime pointing at a binary that is gone.

`configure` is idempotent (configuring its own output changes nothing) and `unconfigure` reverses exactly
what the record says we did.
"""

from __future__ import annotations

import copy
import fnmatch
import posixpath
from collections.abc import Mapping
from typing import Any

import attrs
import tomlkit
import tomlkit.exceptions
import tomlkit.items

from metax_core.errors import FieldError, InvalidSpec
from metax_core.runtime import detect, handler
from metax_core.runtime.record import RootEdit

DROPIN_NAME = "99-metax.toml"
HEADER = (
    "# Written by the MetaX GPU operator's container-runtime agent (runtime handler 'metax').\n"
    "# Do not edit: it is rewritten from the root config; uninstall removes it.\n"
)
RUNC_V2 = "io.containerd.runc.v2"
DEFAULT_RUNC_1X: Mapping[str, Any] = {
    "runtime_type": RUNC_V2,
    "options": {
        "BinaryName": "",
        "CriuImagePath": "",
        "CriuPath": "",
        "CriuWorkPath": "",
        "IoGid": 0,
        "IoUid": 0,
        "NoNewKeyring": False,
        "NoPivotRoot": False,
        "Root": "",
        "ShimCgroup": "",
        "SystemdCgroup": False,
    },
}
"""containerd 1.6's default ``runc`` runtime as ``containerd config default`` prints it: on 1.x a drop-in's
CRI section replaces the root's runtimes map, so when the root file relies on this default the drop-in
carries it, and the effective configuration keeps exactly the same ``runc``."""


def dropin_path(root_path: str) -> str:
    return posixpath.join(posixpath.dirname(root_path), "conf.d", DROPIN_NAME)


@attrs.frozen
class Configured:
    root_text: str
    """The root file as it must be (equal to the input when nothing needs editing)."""
    dropin_text: str
    edits: tuple[RootEdit, ...]
    """What this call changed in the root file (empty when it was already right)."""
    file_version: int


def _parse(text: str, path: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise InvalidSpec([FieldError(path, f"is not valid TOML: {exc}")]) from None


def file_version(doc: Mapping[str, Any], schema: detect.ContainerdSchema, path: str, *, exists: bool) -> int:
    if not exists:
        return schema.file_version
    version = doc.get("version")
    if version is None or version == 1:
        raise InvalidSpec(
            [FieldError(f"{path}: version", "config version 1 is not supported; run `containerd config migrate`")]
        )
    if version not in (2, 3, 4) or isinstance(version, bool):
        raise InvalidSpec([FieldError(f"{path}: version", f"must be 2, 3 or 4, got {version!r}")])
    if version > schema.file_version:
        raise InvalidSpec([FieldError(f"{path}: version", f"{version} is newer than containerd {schema.daemon} reads")])
    return int(version)


def covered(imports: Any, path: str, root_path: str) -> bool:
    """Whether one of ``imports`` (paths or globs, relative to the root file's directory) names ``path``."""
    base = posixpath.dirname(root_path)
    for entry in imports if isinstance(imports, list) else ():
        pattern = str(entry)
        pattern = pattern if pattern.startswith("/") else posixpath.join(base, pattern)
        if fnmatch.fnmatchcase(path, posixpath.normpath(pattern)):
            return True
    return False


def _plain(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


def _get(table: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(table, Mapping) or key not in table:
            return None
        table = table[key]
    return table


def _handler_entry(cri: Mapping[str, Any] | None, wrapper: str) -> dict[str, Any]:
    """The ``metax`` runtime: the default runtime's settings, run through the wrapper."""
    containerd = _get(cri or {}, "containerd") or {}
    default = str(containerd.get("default_runtime_name", "runc"))
    base = _get(containerd, "runtimes", default)
    entry: dict[str, Any] = dict(_plain(base)) if isinstance(base, Mapping) else {"runtime_type": RUNC_V2}
    entry.setdefault("runtime_type", RUNC_V2)
    options = dict(entry.get("options") or {})
    options["BinaryName"] = wrapper
    entry["options"] = options
    return entry


def dropin(doc: Mapping[str, Any], version: int, schema: detect.ContainerdSchema, wrapper: str) -> str:
    """The drop-in's text for root document ``doc`` (see the module's docstring)."""
    plugin = detect.cri_runtime_plugin(version)
    root_cri = _get(doc, "plugins", plugin)
    body: dict[str, Any]
    if version == 2:
        cri: dict[str, Any] = _plain(root_cri) if isinstance(root_cri, Mapping) else {}
        cri = dict(cri)
        containerd = dict(cri.get("containerd") or {})
        runtimes = dict(containerd.get("runtimes") or {})
        default = str(containerd.get("default_runtime_name", "runc"))
        if default not in runtimes:  # the section replaces the default's runtimes map: keep the default runtime
            runtimes[default] = copy.deepcopy(dict(DEFAULT_RUNC_1X))
        runtimes[handler.RUNTIME_HANDLER] = _handler_entry(root_cri, wrapper)
        containerd["runtimes"] = runtimes
        cri["containerd"] = containerd
        if schema.cdi is detect.Cdi.OFF_BY_DEFAULT:
            cri["enable_cdi"] = True
        body = cri
    else:
        body = {"containerd": {"runtimes": {handler.RUNTIME_HANDLER: _handler_entry(root_cri, wrapper)}}}
    return HEADER + tomlkit.dumps({"version": version, "plugins": {plugin: body}})


def configure(
    root_text: str | None, *, root_path: str, schema: detect.ContainerdSchema, wrapper: str = handler.WRAPPER_HOST_PATH
) -> Configured:
    """The root file and drop-in that make handler ``metax`` run ``wrapper`` (``root_text`` None: no root file)."""
    exists = root_text is not None
    doc = _parse(root_text, root_path) if root_text is not None else tomlkit.document()
    version = file_version(doc, schema, root_path, exists=exists)
    path = dropin_path(root_path)
    edits: list[RootEdit] = []
    if not exists:
        doc["version"] = version
    imports = doc.get("imports")
    if imports is not None and not isinstance(imports, list):
        raise InvalidSpec([FieldError(f"{root_path}: imports", f"must be a list of paths, got {_plain(imports)!r}")])
    if not covered(imports, path, root_path):
        if imports is None:
            doc["imports"] = tomlkit.array()
            doc["imports"].append(path)
            edits.append(RootEdit("imports", path, created_key=True))
        else:
            imports.append(path)
            edits.append(RootEdit("imports", path, created_key=False))
    text = tomlkit.dumps(doc) if edits or not exists else str(root_text)
    return Configured(text, dropin(doc, version, schema, wrapper), tuple(edits), version)


def unconfigure(text: str, edits: tuple[RootEdit, ...], root_path: str) -> str:
    """``text`` with each recorded edit reversed where it is still present (an administrator's edits stay)."""
    doc = _parse(text, root_path)
    for edit in edits:
        if edit.key != "imports":
            continue
        imports = doc.get("imports")
        if not isinstance(imports, list):
            continue
        for i, value in enumerate(list(imports)):
            if str(value) == edit.value:
                del imports[i]
                break
        if edit.created_key and len(imports) == 0:
            del doc["imports"]
    return tomlkit.dumps(doc)


def loaded_handler(cri_config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``metax`` runtime in the running daemon's CRI config (CRI ``Status`` verbose ``info["config"]``)."""
    runtimes = _get(cri_config, "containerd", "runtimes")
    entry = runtimes.get(handler.RUNTIME_HANDLER) if isinstance(runtimes, Mapping) else None
    return entry if isinstance(entry, Mapping) else None


def handler_loaded(cri_config: Mapping[str, Any], wrapper: str) -> tuple[bool, str]:
    """Whether the running daemon runs handler ``metax`` through ``wrapper``, and why not."""
    entry = loaded_handler(cri_config)
    if entry is None:
        return False, f"the running containerd has no runtime handler {handler.RUNTIME_HANDLER!r}"
    options = entry.get("options")
    binary = options.get("BinaryName") if isinstance(options, Mapping) else None
    if binary != wrapper:
        return False, f"runtime handler {handler.RUNTIME_HANDLER!r} runs {binary!r}, not {wrapper!r}"
    return True, f"runtime handler {handler.RUNTIME_HANDLER!r} loaded ({wrapper})"


def dumped_handler(dump: str, wrapper: str) -> tuple[bool, str]:
    """Whether ``containerd config dump`` output (the effective config of the files) runs ``metax`` via ``wrapper``."""
    try:
        doc = tomlkit.parse(dump).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        return False, f"containerd config dump printed no TOML: {exc}"
    for plugin in ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"):
        entry = _get(doc, "plugins", plugin, "containerd", "runtimes", handler.RUNTIME_HANDLER)
        if isinstance(entry, Mapping):
            binary = _get(entry, "options", "BinaryName")
            if binary == wrapper:
                return True, f"the configuration declares runtime handler {handler.RUNTIME_HANDLER!r}"
            return False, f"runtime handler {handler.RUNTIME_HANDLER!r} runs {binary!r}, not {wrapper!r}"
    return False, f"the effective configuration has no runtime handler {handler.RUNTIME_HANDLER!r}"
