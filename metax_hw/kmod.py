"""Kernel modules: load with parameters, unload, and read back what the kernel really did.

Why: the driver manager's whole job (R-DRIVER, R-MODPARAM) is "this module, this version, these
parameters", and the only proof is ``/sys/module/<name>/{version,parameters/*}``. modprobe succeeds
silently when the module is already loaded and the kernel ignores unknown parameters with a line in dmesg,
so every load is verified against sysfs and a mismatch is an error naming the parameter. Host driver
versions come from modinfo (for PreferHost/PreferNewer).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import PurePosixPath

from metax_core import errors
from metax_core.inventory import DriverVersion, ModuleState
from metax_core.node import payload_layout
from metax_core.wire import host
from metax_hw import sysfs, tools

logger = logging.getLogger(__name__)

_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODINFO_LINE = re.compile(r"^([a-z_][a-z0-9_]*):\s*(.*)$")
_TRUE = frozenset({"1", "y", "yes", "true", "on"})
_FALSE = frozenset({"0", "n", "no", "false", "off"})
UNLOAD_TIMEOUT = 60.0
"""rmmod waits for the driver's remove of every device; give it longer than a query."""


def sysfs_module_name(name: str) -> str:
    """``vfio-pci`` -> ``vfio_pci``: the kernel names modules with underscores."""
    return name.replace("-", "_")


def module_name_of_file(path: str) -> str:
    """``/var/lib/metax/drivers/2.18.0/metax.ko.xz`` -> ``metax``."""
    return sysfs_module_name(PurePosixPath(path).name.split(".ko")[0])


def parse_modinfo(text: str, module: str) -> dict[str, list[str]]:
    """``field: value`` lines of modinfo into lists per field (``parm`` and ``alias`` repeat)."""
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = _MODINFO_LINE.match(line.strip())
        if match:
            fields.setdefault(match.group(1), []).append(match.group(2).strip())
    if not fields.get("filename") and not fields.get("name"):
        shown = text.strip()[:200] or "(nothing)"
        raise errors.HardwareError("read module info", module, f"modinfo printed no module fields: {shown!r}")
    return fields


def module_params_of(fields: Mapping[str, list[str]]) -> dict[str, str]:
    """``parm: xcore_page_size:xcore page size (int)`` -> ``{"xcore_page_size": "xcore page size (int)"}``."""
    params: dict[str, str] = {}
    for entry in fields.get("parm", []):
        name, _, description = entry.partition(":")
        if _PARAM_NAME.match(name.strip()):
            params[name.strip()] = description.strip()
    return params


def same_param_value(asked: str, seen: str) -> bool:
    """Whether sysfs shows what was asked, allowing the kernel's spelling (``1`` -> ``Y``, ``0x10`` -> ``16``)."""
    a, s = asked.strip(), seen.strip()
    if a == s:
        return True
    if a.lower() in _TRUE | _FALSE and s.lower() in _TRUE | _FALSE:
        return (a.lower() in _TRUE) == (s.lower() in _TRUE)
    try:
        return int(a, 0) == int(s, 0)
    except ValueError:
        return False


def format_params(module: str, params: Mapping[str, str], operation: str) -> list[str]:
    args: list[str] = []
    for name, value in sorted(params.items()):
        if not _PARAM_NAME.match(name):
            raise errors.HardwareError(operation, module, f"{name!r} is not a module parameter name")
        if value == "" or any(c.isspace() for c in value) or not value.isprintable():
            raise errors.HardwareError(operation, module, f"parameter {name}={value!r}: empty or contains spaces")
        args.append(f"{name}={value}")
    return args


class ModprobeKernelModules:
    """`metax_core.ports.hardware.KernelModules`: modprobe/insmod/rmmod/modinfo, read back from sysfs."""

    def __init__(
        self, tree: sysfs.HostTree, runner: tools.ToolRunner, local_runner: tools.ToolRunner | None = None
    ) -> None:
        self.tree = tree
        self.runner = runner
        self.local_runner = local_runner or runner
        """Runs DIRECT: modinfo of files in the agent's own filesystem (the payload image), never the host's."""

    def load(self, name: str, params: Mapping[str, str]) -> None:
        op = "load module"
        args = format_params(name, params, op)
        self.runner.run(tools.MODPROBE, [name, *args], operation=op, device=name, timeout=tools.DEFAULT_TIMEOUT * 6)
        self._verify_loaded(name, params, op)
        logger.info("loaded %s %s", name, " ".join(args))

    def load_file(self, path: str, params: Mapping[str, str]) -> None:
        op = "load module file"
        name = module_name_of_file(path)
        args = format_params(name, params, op)
        loaded = self.state(name)
        if loaded is not None:
            raise errors.HardwareError(
                op, name, f"{name} is already loaded (version {loaded.version or 'unknown'}); unload it first"
            )
        target = path if self.runner.mode is tools.ExecMode.HOST else str(self.tree.path(path))
        self.runner.run(tools.INSMOD, [target, *args], operation=op, device=name, timeout=tools.DEFAULT_TIMEOUT * 6)
        self._verify_loaded(name, params, op)
        logger.info("inserted %s from %s %s", name, path, " ".join(args))

    def unload(self, name: str) -> None:
        op = "unload module"
        if self.state(name) is None:
            logger.debug("%s is not loaded", name)
            return
        self.runner.run(tools.RMMOD, [sysfs_module_name(name)], operation=op, device=name, timeout=UNLOAD_TIMEOUT)
        if self.state(name) is not None:
            raise errors.HardwareError(op, name, f"rmmod returned but /sys/module/{sysfs_module_name(name)} remains")
        logger.info("unloaded %s", name)

    def state(self, name: str) -> ModuleState | None:
        op = "read module state"
        mod = sysfs_module_name(name)
        directory = self.tree.path("/sys/module") / mod
        if not directory.is_dir():
            return None
        params: dict[str, str] = {}
        for param in self.tree.listdir(directory / "parameters"):
            try:
                value = self.tree.read(directory / "parameters" / param, operation=op, device=mod)
            except errors.HardwareError as exc:
                logger.debug("parameter %s of %s unreadable: %s", param, mod, exc.detail)
                continue
            if value is not None:
                params[param] = value
        version = self.tree.read(directory / "version", operation=op, device=mod)
        refcount = self.tree.read_int(directory / "refcnt", operation=op, device=mod)
        return ModuleState(
            name=mod, version=DriverVersion(version) if version else None, params=params, refcount=refcount
        )

    def modinfo(self, name_or_path: str) -> dict[str, list[str]]:
        """modinfo fields of an installed module (by name) or a module file (host-absolute path)."""
        arg = name_or_path
        if "/" in name_or_path and self.runner.mode is not tools.ExecMode.HOST:
            arg = str(self.tree.path(name_or_path))
        out = self.runner.run(tools.MODINFO, [arg], operation="read module info", device=name_or_path)
        return parse_modinfo(out.stdout, name_or_path)

    def running_kernel(self) -> payload_layout.RunningKernel:
        """The release from ``<root>/proc/sys/kernel/osrelease`` (a container shares its host's kernel, so
        without that file the agent's own ``uname -r``), and the vermagic of the first in-tree module listed
        in ``/lib/modules/<release>/modules.dep`` (None when there is none, or modinfo cannot read it)."""
        op = "read the running kernel"
        release = self.tree.read(self.tree.path("/proc/sys/kernel/osrelease"), operation=op, device=None)
        release = release or os.uname().release
        deps = self.tree.read(
            self.tree.path(f"{host.KERNEL_MODULES}/{release}/modules.dep"), operation=op, device=release
        )
        in_tree = [line.split(":", 1)[0].strip() for line in (deps or "").splitlines() if line.startswith("kernel/")]
        magic = None
        if in_tree:
            try:
                shown = self.modinfo(f"{host.KERNEL_MODULES}/{release}/{in_tree[0]}").get("vermagic") or [""]
                magic = payload_layout.Vermagic.parse(shown[0])
            except (errors.HardwareError, ValueError) as exc:
                logger.info("running kernel %s: no vermagic of its own modules (%s)", release, exc)
        return payload_layout.RunningKernel(release, magic)

    def file_vermagic(self, local_path: str) -> payload_layout.Vermagic:
        op = "read module vermagic"
        out = self.local_runner.run(tools.MODINFO, ["-F", "vermagic", local_path], operation=op, device=local_path)
        try:
            return payload_layout.Vermagic.parse(out.stdout)
        except ValueError as exc:
            raise errors.HardwareError(op, local_path, str(exc)) from exc

    def installed_version(self, name: str) -> DriverVersion | None:
        try:
            fields = self.modinfo(name)
        except errors.HardwareError as exc:
            if "not found" in exc.detail.lower():
                return None
            raise
        versions = fields.get("version") or [""]
        return DriverVersion(versions[0]) if versions[0] else None

    def supported_params(self, name_or_path: str) -> Mapping[str, str]:
        """Parameter names (with their modinfo description) a module accepts, to refuse unknown ones early."""
        return module_params_of(self.modinfo(name_or_path))

    def _verify_loaded(self, name: str, params: Mapping[str, str], op: str) -> None:
        state = self.state(name)
        mod = sysfs_module_name(name)
        if state is None:
            raise errors.HardwareError(op, name, f"the tool succeeded but /sys/module/{mod} does not exist")
        for param, asked in sorted(params.items()):
            seen = state.params.get(param)
            if seen is None:
                raise errors.HardwareError(
                    op, name, f"the module has no parameter {param} (not in /sys/module/{mod}/parameters)"
                )
            if not same_param_value(asked, seen):
                raise errors.HardwareError(
                    op,
                    name,
                    f"{param} is {seen} after loading, {asked} was asked (a loaded module keeps its parameters: "
                    "unload it first)",
                )
