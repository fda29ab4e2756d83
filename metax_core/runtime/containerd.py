"""containerd's configuration for the ``metax`` runtime handler: an owned drop-in plus a recorded root edit.

What we write (C4, docs/container-runtime.md):

* **the drop-in**, ours entirely, at the root file's ``version``. It declares the runtime handler ``metax``: a
  copy of the node's default runtime (its ``runtime_type`` and options, so ``SystemdCgroup`` and the runc root
  stay as the kubelet expects) whose ``BinaryName`` is the wrapper.

  - containerd 2.x (config ``version`` 3 and 4) deep-merges imports: the drop-in ``<root dir>/conf.d/99-metax.toml``
    carries the handler only.
  - containerd 1.x (``version = 2``) *replaces* a whole plugin section with an imported file's: what the node runs
    with is the CRI section of the **last** file in containerd's load order that has one (root, then its imports:
    `containerd_imports`), which need not be the root's (an EKS node's ``config.d`` drop-ins, an NVIDIA-configured
    node's ``conf.d/99-nvidia.toml``). So the drop-in, ``<root dir>/metax/99-metax.toml`` (a directory no vendor's
    glob covers), carries a copy of that *effective* section plus the handler, and is imported **last** (our
    entry is the root's last import, moved back there when someone appends another). A file loaded after ours
    that defines the section would replace it, and is refused by name; so is an import that names no file (1.x
    does not start with one). On 1.7 ``enable_cdi = true`` is added only when the effective section does not set
    ``enable_cdi``: an administrator's explicit ``false`` stays (the node then gets its devices as on 1.6,
    through the device plugin's device nodes and the wrapper).
* **the root edit**: only ``imports`` changes: our drop-in's path appended (and, after the node's containerd moved
  between 1.x and 2.x, our entry for the other drop-in removed). On 2.x nothing is added when an import (a glob
  such as ``conf.d/*.toml``) already covers the drop-in. An absent root file is created. Edits go through
  tomlkit, so comments, order and formatting of everything else are kept.

The handler is **not** the default runtime: a RuntimeClass ``metax`` (handler ``metax``) selects it, so a
container that asks for no GPU never passes through our wrapper, and uninstalling cannot leave the node's
default runtime pointing at a binary that is gone.

`configure` is idempotent (configuring its own output changes nothing) and `unconfigure` reverses exactly
what the record says we did.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import tomlkit
import tomlkit.exceptions
import tomlkit.items

from metax_core.errors import FieldError, InvalidSpec
from metax_core.runtime import containerd_imports, detect, handler
from metax_core.runtime.record import RootEdit

DROPIN_NAME = "99-metax.toml"
HEADER = (
    "# Written by the MetaX GPU operator's container-runtime agent (runtime handler 'metax').\n"
    "# Do not edit: it is rewritten from the node's configuration; uninstall removes it.\n"
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
CRI section replaces the effective runtimes map, so when no file defines the default runtime the drop-in
carries this one, and the effective configuration keeps exactly the same ``runc``."""
CDI_KEY = "enable_cdi"


def dropin_path(root_path: str, file_version: int) -> str:
    """Our drop-in next to ``root_path``: 2 stands for containerd 1.x (which replaces sections: see the module
    docstring), 3 and 4 for 2.x (a version-2 root on containerd 2.x gets the 2.x drop-in: `configure`)."""
    directory = "metax" if file_version == 2 else "conf.d"
    return posixpath.join(posixpath.dirname(root_path), directory, DROPIN_NAME)


def dropin_paths(root_path: str) -> tuple[str, ...]:
    """Every path our drop-in can have next to ``root_path`` (1.x first)."""
    return (dropin_path(root_path, 2), dropin_path(root_path, 3))


@attrs.frozen
class Configured:
    root_text: str
    """The root file as it must be (equal to the input when nothing needs editing)."""
    dropin_text: str
    edits: tuple[RootEdit, ...]
    """What this call added to the root file (empty when it was already right)."""
    file_version: int
    dropin: str = ""
    """Where the drop-in goes (`dropin_path`)."""
    copies: tuple[str, ...] = ()
    """The files whose content the drop-in copies (the root, and on 1.x the file whose CRI section is in effect):
    the drop-in is made no more permissive than any of them (it may carry registry credentials)."""
    loaded: tuple[str, ...] = ()
    """The files containerd loads from the root, in its order (ours included)."""
    cdi_off: str | None = None
    """containerd 1.7 with an explicit ``enable_cdi = false``: the file that sets it (CDI stays off)."""
    cdi_added: bool = False
    """containerd 1.7 where no file sets ``enable_cdi``: the drop-in turns CDI on (`containerd_dump` allows it)."""
    stale: tuple[str, ...] = ()
    """Our drop-in of the other containerd major (`dropin_paths`): removed where it exists, its import dropped."""

    @property
    def note(self) -> str:
        """What the readiness reason adds (containerd 1.7 with CDI off: how devices come instead)."""
        if self.cdi_off is None:
            return ""
        return (
            f"; CDI is off on this containerd ({CDI_KEY} = false in {self.cdi_off}): devices come from the "
            "device plugin's device nodes and the wrapper, as on containerd 1.6"
        )


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
    """Whether one of ``imports`` (paths or globs, relative to the root file's directory) names ``path``, the way
    containerd resolves them (`containerd_imports.resolve`, Go's glob: ``*`` never crosses ``/``)."""
    for entry in imports if isinstance(imports, list) else ():
        resolved = containerd_imports.resolve(str(entry), root_path)
        if resolved == path or (containerd_imports.is_glob(resolved) and containerd_imports.glob_match(resolved, path)):
            return True
    return False


def _plain(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


_get = containerd_imports.get


def _handler_entry(cri: Mapping[str, Any] | None, wrapper: str) -> dict[str, Any]:
    """The ``metax`` runtime: the default runtime's settings, run through the wrapper."""
    containerd = _get(cri or {}, "containerd") or {}
    default = str(containerd.get("default_runtime_name", "runc"))
    base = _get(containerd, "runtimes", default)
    entry: dict[str, Any] = copy.deepcopy(dict(_plain(base))) if isinstance(base, Mapping) else {}
    entry.setdefault("runtime_type", RUNC_V2)
    options = dict(entry.get("options") or {})
    options["BinaryName"] = wrapper
    entry["options"] = options
    return entry


def _merge_into(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    """containerd 2.x's merge: tables key by key, any other value replaced."""
    for key, value in other.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge_into(into[key], value)
        else:
            into[key] = copy.deepcopy(_plain(value))


def _deep_merged(walked: containerd_imports.Walk, plugin: str, until: str) -> dict[str, Any]:
    """containerd 2.x's view of ``plugins.<plugin>`` from the files loaded before ``until``: merged key by key."""
    out: dict[str, Any] = {}
    for path in walked.order:
        if path == until:
            break
        section = _get(walked.docs[path], "plugins", plugin)
        if isinstance(section, Mapping):
            _merge_into(out, section)
    return out


def _dropin_1x(section: Mapping[str, Any] | None, schema: detect.ContainerdSchema, wrapper: str) -> dict[str, Any]:
    cri: dict[str, Any] = copy.deepcopy(dict(_plain(section))) if isinstance(section, Mapping) else {}
    containerd = dict(cri.get("containerd") or {})
    runtimes = dict(containerd.get("runtimes") or {})
    default = str(containerd.get("default_runtime_name", "runc"))
    if default not in runtimes:  # the section replaces the default's runtimes map: keep the default runtime
        runtimes[default] = copy.deepcopy(dict(DEFAULT_RUNC_1X))
    runtimes[handler.RUNTIME_HANDLER] = _handler_entry(cri, wrapper)
    containerd["runtimes"] = runtimes
    cri["containerd"] = containerd
    if schema.cdi is detect.Cdi.OFF_BY_DEFAULT and CDI_KEY not in cri:
        cri[CDI_KEY] = True
    return cri


def _render(version: int, plugin: str, body: Mapping[str, Any]) -> str:
    return HEADER + tomlkit.dumps({"version": version, "plugins": {plugin: body}})


def _refuse(path: str, message: str) -> InvalidSpec:
    return InvalidSpec([FieldError(path, message)])


def _ensure_import_last(doc: tomlkit.TOMLDocument, path: str, edits: list[RootEdit]) -> None:
    imports = doc.get("imports")
    if imports is None:
        doc["imports"] = tomlkit.array()
        doc["imports"].append(path)
        edits.append(RootEdit("imports", path, created_key=True))
        return
    entries = [str(i) for i in imports]
    if entries and entries[-1] == path:
        return
    if path in entries:  # ours, but someone appended after it: ours goes back to the end
        del imports[entries.index(path)]
        imports.append(path)
        return
    imports.append(path)
    edits.append(RootEdit("imports", path, created_key=False))


def _drop_stale(doc: tomlkit.TOMLDocument, stale: Sequence[str]) -> None:
    imports = doc.get("imports")
    if not isinstance(imports, list):
        return
    for i in reversed(range(len(imports))):
        if str(imports[i]) in stale:
            del imports[i]


def configure(
    root_text: str | None,
    *,
    root_path: str,
    schema: detect.ContainerdSchema,
    wrapper: str = handler.WRAPPER_HOST_PATH,
    loaded: Mapping[str, str | None] | None = None,
    globs: Mapping[str, Sequence[str]] | None = None,
) -> Configured:
    """The root file and drop-in that make handler ``metax`` run ``wrapper`` (``root_text`` None: no root file).

    ``loaded`` and ``globs`` are the files the root imports (path → text, None: no such file) and each import
    glob's matches, gathered until `containerd_imports.walk` wants nothing more; absent, the root imports nothing
    that exists."""
    exists = root_text is not None
    doc = _parse(root_text, root_path) if root_text is not None else tomlkit.document()
    version = file_version(doc, schema, root_path, exists=exists)
    if not exists:
        doc["version"] = version
    imports = doc.get("imports")
    if imports is not None and not isinstance(imports, list):
        raise InvalidSpec([FieldError(f"{root_path}: imports", f"must be a list of paths, got {_plain(imports)!r}")])
    replaces = schema.replaces_sections  # 1.x: the daemon, not the file's version, decides how imports merge
    ours = dropin_path(root_path, 2 if replaces else 3)
    stale = tuple(p for p in dropin_paths(root_path) if p != ours)
    texts = {**(loaded or {}), root_path: root_text}
    edits: list[RootEdit] = []
    _drop_stale(doc, stale)
    current = containerd_imports.walk(
        root_path, texts, globs or {}, replace={root_path: doc.unwrap(), **{p: {} for p in (ours, *stale)}}
    )
    if replaces:
        if containerd_imports.covered_by(current, ours) is None:
            _ensure_import_last(doc, ours, edits)
    elif not covered(doc.get("imports"), ours, root_path):
        _ensure_import_last(doc, ours, edits)
    plugin = detect.cri_runtime_plugin(version)
    walked = containerd_imports.walk(
        root_path, texts, globs or {}, replace={root_path: doc.unwrap(), ours: {}, **{p: {} for p in stale}}
    )
    missing = [p for p in walked.missing if p not in (ours, *stale)]
    if replaces and missing:
        raise _refuse(
            f"{root_path}: imports",
            f"names {missing[0]}, which does not exist: containerd 1.x does not start with an import that names "
            "no file",
        )
    cdi_off: str | None = None
    cdi_added = False
    if replaces:
        hidden = containerd_imports.defined_after(walked, plugin, ours)
        if hidden:
            raise _refuse(
                hidden[0],
                f"is loaded after {ours} and defines plugins.{plugin!r}, which containerd 1.x replaces as a whole: "
                f"runtime handler {handler.RUNTIME_HANDLER!r} would never load; have it imported before {ours} "
                "(or move its settings into the root file)",
            )
        section = containerd_imports.effective_section(walked, plugin, until=ours)
        body = _dropin_1x(section.body, schema, wrapper)
        copies = tuple(dict.fromkeys(p for p in (root_path, section.origin) if p is not None))
        if schema.cdi is detect.Cdi.OFF_BY_DEFAULT and body.get(CDI_KEY) is False:
            cdi_off = section.origin
        cdi_added = schema.cdi is detect.Cdi.OFF_BY_DEFAULT and CDI_KEY not in (section.body or {})
    else:
        # containerd 2.x migrates a version-2 file's io.containerd.grpc.v1.cri into io.containerd.cri.v1.runtime:
        # the default runtime may be defined under either name (AKS's version-2 files use the new one)
        merged = _deep_merged(walked, detect.cri_runtime_plugin(2), ours)
        _merge_into(merged, _deep_merged(walked, detect.cri_runtime_plugin(3), ours))
        body = {"containerd": {"runtimes": {handler.RUNTIME_HANDLER: _handler_entry(merged, wrapper)}}}
        copies = (root_path,)
    changed = bool(edits) or _imports_of(root_text, root_path) != _plain(doc.get("imports"))
    text = tomlkit.dumps(doc) if changed or not exists else str(root_text)
    return Configured(
        text,
        _render(version, plugin, body),
        tuple(edits),
        version,
        ours,
        copies,
        walked.order,
        cdi_off,
        cdi_added,
        stale,
    )


def _imports_of(root_text: str | None, root_path: str) -> Any:
    return None if root_text is None else _plain(_parse(root_text, root_path).get("imports"))


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


def without_our_imports(text: str, root_path: str) -> str:
    """The root file ``text`` as it would be without our drop-ins' imports (the node's own configuration, for the
    dump taken before a write)."""
    return unconfigure(text, tuple(RootEdit("imports", p) for p in dropin_paths(root_path)), root_path)


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
