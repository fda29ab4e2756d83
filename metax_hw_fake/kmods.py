"""The fake kernel's module loader: module files, load with parameters, unload, modules.dep lookups.

Why: R-DRIVER and R-MODPARAM are judged by what ``/sys/module/<name>`` shows after a load, so the fake
must behave like the kernel where it matters: a loaded module is EEXIST for insmod (and a silent success
for modprobe, which the tool handles), unknown parameters are ignored with a log line, parameters not given
take the module's defaults, a module in use cannot be removed (EBUSY), a module built for another kernel
is refused as the kernel refuses it (ENOEXEC, ``Invalid module format``, and a ``version magic`` line in
dmesg), and a driver module binds every unbound device it claims when it arrives and releases them when it
goes. Standard library only.

A fake module file is text: ``name=``, ``version=``, ``driver=``, ``ids=<vendor>:<device>`` (``ffff`` for
any device), ``parm=<name>:<type>:<default>:<description>`` lines and an optional ``vermagic=`` (the kernel
it was built for; absent: built for the running kernel).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from metax_hw_fake import layout, pcidev

State = dict[str, Any]
MAGIC = "fake-kernel-module"


class KmodError(Exception):
    """What the kernel (or kmod) refused, with the errno the tools turn into their message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def write_module_file(
    path: Path,
    name: str,
    version: str | None,
    driver: str | None,
    ids: list[tuple[int, int]],
    params: dict[str, tuple[str, str, str]],
    *,
    vermagic: str | None = None,
) -> None:
    """``params``: name -> (type, default, description); ``vermagic``: the kernel the module was built for,
    as ``modinfo -F vermagic`` shows it (None: the running kernel, whatever it is)."""
    lines = [MAGIC, f"name={name}"]
    if version:
        lines.append(f"version={version}")
    if vermagic:
        lines.append(f"vermagic={vermagic}")
    if driver:
        lines.append(f"driver={driver}")
    lines += [f"ids={vendor:04x}:{device & 0xFFFF:04x}" for vendor, device in ids]
    lines += [f"parm={p}:{kind}:{default}:{text}" for p, (kind, default, text) in params.items()]
    layout.put(path, "\n".join(lines))


def read_module_file(path: Path) -> dict[str, Any]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise KmodError(errno.ENOENT, f"could not load module {path}: No such file or directory") from None
    if not lines or lines[0] != MAGIC:
        raise KmodError(errno.ENOEXEC, f"could not insert module {path}: Invalid module format")
    info: dict[str, Any] = {"params": {}, "ids": [], "path": str(path)}
    for line in lines[1:]:
        key, _, value = line.partition("=")
        if key == "parm":
            name, kind, default, text = ([*value.split(":", 3), "", "", ""])[:4]
            info["params"][name] = {"type": kind, "default": default, "description": text}
        elif key == "ids":
            vendor, device = value.split(":")
            info["ids"].append([int(vendor, 16), -1 if device == "ffff" else int(device, 16)])
        else:
            info[key] = value
    return info


_TRUE, _FALSE = ("y", "Y", "1", "on"), ("n", "N", "0", "off")


def param_value(kind: str, value: str) -> str | None:
    """How ``/sys/module/<m>/parameters/<p>`` shows ``value`` (None: the kernel refuses it, EINVAL).

    Linux prints a bool as ``Y``/``N`` whatever was written (``enable_sriov=1`` reads back ``Y``) and an
    integer in decimal (``0x10`` reads back ``16``); other types as given.
    """
    if kind == "bool":
        return "Y" if value in _TRUE else "N" if value in _FALSE else None
    if kind in ("int", "uint", "long", "ulong", "short", "ushort", "byte"):
        try:
            number = int(value, 0)
        except ValueError:
            return None
        return None if kind.startswith("u") and number < 0 else str(number)
    return value


def installed(root: Path, st: State, name: str) -> Path | None:
    """The module file for ``name`` in ``/lib/modules/<release>/modules.dep`` (``-`` and ``_`` are one)."""
    base = layout.modules_root(root, st["kernel_release"])
    wanted = name.replace("-", "_")
    for line in (layout.get(base / "modules.dep") or "").splitlines():
        rel = line.split(":", 1)[0].strip()
        if rel and Path(rel).name.split(".ko")[0].replace("-", "_") == wanted:
            return base / rel
    return None


def is_loaded(root: Path, name: str) -> bool:
    return (layout.module_dir(root, name) / "initstate").exists()


def vermagic(release: str) -> str:
    """The version magic of modules built for kernel ``release`` (what ``modinfo -F vermagic`` prints)."""
    return f"{release} SMP mod_unload modversions"


def load(root: Path, st: State, info: dict[str, Any], params: dict[str, str]) -> list[str]:
    """Insert a module; returns the kernel log lines (unknown parameters)."""
    mod = str(info["name"]).replace("-", "_")
    if is_loaded(root, mod):
        raise KmodError(errno.EEXIST, f"could not insert module {info['path']}: File exists")
    built_for, running = info.get("vermagic"), vermagic(st["kernel_release"])
    if built_for is not None and built_for != running:
        st["dmesg"].append(f"{mod}: version magic '{built_for}' should be '{running}'")
        raise KmodError(errno.ENOEXEC, f"could not insert module {info['path']}: Invalid module format")
    fails = st["faults"]["load_fails"]
    failure = fails.get(mod) or fails.get(f"{mod}@{info.get('version')}")
    if failure is not None:
        raise KmodError(errno.EINVAL, failure)
    log: list[str] = []
    directory = layout.module_dir(root, mod)
    known: dict[str, dict[str, str]] = info["params"]
    shown: dict[str, str] = {}
    for param, value in params.items():
        if param not in known:
            log.append(f"{mod}: unknown parameter '{param}' ignored")
            continue
        parsed = param_value(known[param]["type"], value)
        if parsed is None:
            st["dmesg"].append(f"{mod}: `{value}' invalid for parameter `{param}'")
            raise KmodError(errno.EINVAL, "Invalid argument")
        shown[param] = parsed
    for param, spec in known.items():
        value = shown.get(param, param_value(spec["type"], spec["default"]) or spec["default"])
        layout.put(directory / "parameters" / param, value or "(null)")
    if info.get("version"):
        layout.put(directory / "version", str(info["version"]))
    layout.put(directory / "refcnt", "0")
    (directory / "holders").mkdir(parents=True, exist_ok=True)
    driver = info.get("driver")
    if driver:
        _register_driver(root, st, mod, str(driver), info["ids"])
    layout.put(directory / "initstate", "live")
    return log


def _register_driver(root: Path, st: State, mod: str, driver: str, ids: list[list[int]]) -> None:
    driver_dir = layout.drivers_dir(root) / driver
    for attribute in ("bind", "unbind", "new_id", "remove_id"):
        layout.put(driver_dir / attribute, "")
    layout.relink(driver_dir / "module", layout.module_dir(root, mod))
    st["driver_ids"][driver] = [list(i) for i in ids]
    st["module_drivers"][mod] = driver
    if driver == st["native_driver"]:
        layout.put(layout.dev(root) / "mxcd", "fake MetaX control device")
    if driver == pcidev.VFIO:
        layout.put(layout.dev(root) / "vfio" / "vfio", "fake vfio container device")
    for entry in sorted(layout.devices_dir(root).iterdir()):
        addr = entry.name
        if pcidev.driver_of(root, addr) is not None:
            continue
        override = pcidev.override_of(root, addr)
        if not pcidev.can_probe(root, addr):
            continue
        if override == driver or (override is None and pcidev.claims(root, st, driver, addr)):
            try:
                pcidev.check_bind_faults(root, st, addr, driver)
            except OSError:
                continue
            pcidev.attach(root, st, addr, driver)


def in_use(root: Path, st: State, mod: str) -> bool:
    refcnt = int(layout.get(layout.module_dir(root, mod) / "refcnt") or "0")
    busy_driver = st["module_drivers"].get(mod) == st["native_driver"] and bool(st["processes"])
    return mod in st["faults"]["in_use"] or refcnt > 0 or busy_driver


def unload(root: Path, st: State, name: str) -> None:
    mod = name.replace("-", "_")
    if not is_loaded(root, mod):
        raise KmodError(errno.ENOENT, f"Module {mod} is not currently loaded")
    if in_use(root, st, mod):
        raise KmodError(errno.EBUSY, f"Module {mod} is in use")
    driver = st["module_drivers"].pop(mod, None)
    if driver is not None:
        driver_dir = layout.drivers_dir(root) / driver
        for entry in sorted(driver_dir.iterdir()):
            if layout.PCI_ADDRESS.match(entry.name) and pcidev.driver_of(root, entry.name) == driver:
                pcidev.unbind(root, st, entry.name, driver)
        layout.unlink(driver_dir)
        st["driver_ids"].pop(driver, None)
        if driver == st["native_driver"]:
            layout.unlink(layout.dev(root) / "mxcd")
        if driver == pcidev.VFIO:
            layout.unlink(layout.dev(root) / "vfio" / "vfio")
    layout.unlink(layout.module_dir(root, mod))
