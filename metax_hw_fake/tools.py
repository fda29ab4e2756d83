"""The fake host's executables: modprobe, insmod, rmmod, modinfo and mx-smi, as one entry point.

Why: the real adapter runs tools as real subprocesses through `sh`, with timeouts and exit codes; the fake
host puts small wrapper scripts named like the tools in ``<root>/.metax-fake/bin`` that land here. Messages
and exit codes follow kmod's and (as far as known) mx-smi's, so the adapter's error handling is exercised
for real. Standard library only, so each call starts quickly.
"""

from __future__ import annotations

import errno
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from metax_hw_fake import kmods, layout, smi, state

State = dict[str, Any]


def _params(args: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for arg in args:
        name, _, value = arg.partition("=")
        params[name] = value
    return params


def _driver_version(root: Path, st: State) -> str | None:
    return layout.get(layout.module_dir(root, st["native_module"]) / "version")


def modprobe(root: Path, args: list[str], err: TextIO) -> int:
    flags = [a for a in args if a.startswith("-")]
    rest = [a for a in args if not a.startswith("-")]
    unknown = [f for f in flags if f not in ("-r", "--remove", "-q", "--quiet", "-v", "--verbose")]
    if unknown or not rest:
        err.write(f"modprobe: ERROR: unsupported arguments {' '.join(unknown) or '(no module)'}\n")
        return 1
    name, params = rest[0], _params(rest[1:])
    with state.transaction(root) as st:
        if "-r" in flags or "--remove" in flags:
            if not kmods.is_loaded(root, name):
                return 0
            try:
                kmods.unload(root, st, name)
            except kmods.KmodError as exc:
                err.write(f"modprobe: FATAL: {exc.message}.\n")
                return 1
            return 0
        if kmods.is_loaded(root, name):
            return 0  # kmod: already loaded is success, and the new parameters are silently not applied
        path = kmods.installed(root, st, name)
        if path is None:
            err.write(f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{st['kernel_release']}\n")
            return 1
        try:
            st["dmesg"] += kmods.load(root, st, kmods.read_module_file(path), params)
        except kmods.KmodError as exc:
            err.write(f"modprobe: ERROR: could not insert '{name.replace('-', '_')}': {exc.message}\n")
            return 1
    return 0


def insmod(root: Path, args: list[str], err: TextIO) -> int:
    if not args:
        err.write("insmod: ERROR: missing filename.\n")
        return 1
    path, params = Path(args[0]), _params(args[1:])
    with state.transaction(root) as st:
        try:
            st["dmesg"] += kmods.load(root, st, kmods.read_module_file(path), params)
        except kmods.KmodError as exc:
            err.write(f"insmod: ERROR: {exc.message}\n")
            return 1
    return 0


def rmmod(root: Path, args: list[str], err: TextIO) -> int:
    names = [a for a in args if not a.startswith("-")]
    if not names:
        err.write("rmmod: ERROR: missing module name.\n")
        return 1
    with state.transaction(root) as st:
        for name in names:
            try:
                kmods.unload(root, st, name)
            except kmods.KmodError as exc:
                err.write(f"rmmod: ERROR: {exc.message}\n")
                return 1
    return 0


def modinfo(root: Path, args: list[str], out: TextIO, err: TextIO) -> int:
    field = None
    if len(args) >= 2 and args[0] in ("-F", "--field"):
        field, args = args[1], args[2:]
    if len(args) != 1:
        err.write("modinfo: ERROR: expected one module\n")
        return 1
    target = args[0]
    with state.transaction(root) as st:
        path = Path(target) if "/" in target else kmods.installed(root, st, target)
        release = st["kernel_release"]
    if path is None:
        err.write(f"modinfo: ERROR: Module {target} not found.\n")
        return 1
    try:
        info = kmods.read_module_file(path)
    except kmods.KmodError:
        err.write(f"modinfo: ERROR: Module {target} not found.\n")
        return 1
    shown = "/" + str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    fields: list[tuple[str, str]] = [("filename", shown)]
    if info.get("version"):
        fields.append(("version", str(info["version"])))
    fields += [("license", "GPL"), ("description", f"{info['name']} (fake module)")]
    fields += [
        ("alias", f"pci:v0000{v:04X}d{'*' if d == -1 else f'0000{d:04X}'}sv*sd*bc*sc*i*") for v, d in info["ids"]
    ]
    built_for = str(info.get("vermagic") or kmods.vermagic(release))
    fields += [("depends", ""), ("name", str(info["name"])), ("vermagic", built_for)]
    fields += [("parm", f"{p}:{spec['description']} ({spec['type']})") for p, spec in info["params"].items()]
    for key, value in fields:
        if field is None:
            out.write(f"{key + ':':<16}{value}\n")
        elif key == field:
            out.write(f"{value}\n")
    return 0


def mx_smi(root: Path, args: list[str], out: TextIO, err: TextIO) -> int:
    text = ""
    with state.transaction(root) as st:
        mode = st["faults"]["smi"]
        if mode is None and not (layout.dev(root) / "mxcd").exists():
            err.write("mx-smi: no MetaX device found (is the metax driver loaded?)\n")
            return 1
        if mode is None:
            if args[:1] in (["-u"], ["-U"]):
                return _flash(root, st, args, out)
            rendered = _render(root, st, args)
            if rendered is None:
                err.write(f"mx-smi: unrecognized arguments: {' '.join(args)}\n")
                return 2
            text = rendered
    if mode == "hang":
        time.sleep(3600)
        return 1
    if mode == "garbage":
        out.write(smi.garbage())
        return 0
    if mode == "fail":
        err.write("mx-smi: failed to initialize mxsml: driver/library version mismatch\n")
        return 255
    out.write(text)
    return 0


def _render(root: Path, st: State, args: list[str]) -> str | None:
    version = _driver_version(root, st)
    if not args:
        return smi.summary(root, st, version)
    if args == ["--show-version"]:
        return smi.versions(root, st, version)
    if args == ["topo", "-m"]:
        return smi.topology(root, st)
    if args == ["-L"]:
        return smi.gpu_list(root, st)
    return None


def _flash(root: Path, st: State, args: list[str], out: TextIO) -> int:
    options = dict(zip(args[::2], args[1::2], strict=False))
    image = Path(options.get("-u") or options.get("-U") or "")
    gpus = {str(g.index): g.address for g in smi.listed(root, st)}
    targets = list(gpus.values()) if options.get("-i", "all") == "all" else [gpus.get(options["-i"], "")]
    if "" in targets:
        out.write(f"Invalid GPU index {options.get('-i')}\n")
        return 1
    try:
        content = dict(line.split("=", 1) for line in image.read_text().split() if "=" in line)
    except OSError as exc:
        out.write(f"Upgrade firmware failed: cannot open {image}: {exc.strerror}\n")
        return 1
    if "vbios" not in content:
        out.write(f"Upgrade firmware failed: {image} is not a VBIOS image\n")
        return 1
    for address in targets:
        failure = st["faults"]["flash_fails"].get(address) or st["faults"]["flash_fails"].get("*")
        if failure is not None:
            out.write(f"GPU#{options.get('-i')} Upgrade firmware failed: {failure}\n")
            return 1
    for address in targets:
        st["gpus"][address]["vbios_pending"] = content["vbios"]
        st["gpus"][address]["virt_pending"] = content.get("virt", "0") == "1"
        out.write(f"GPU {address}: VBIOS {content['vbios']} written, reboot the machine to take effect\n")
    return 0


def main(tool: str, root: str, argv: list[str]) -> int:
    base = Path(root)
    if tool == "modprobe":
        return modprobe(base, argv, sys.stderr)
    if tool == "insmod":
        return insmod(base, argv, sys.stderr)
    if tool == "rmmod":
        return rmmod(base, argv, sys.stderr)
    if tool == "modinfo":
        return modinfo(base, argv, sys.stdout, sys.stderr)
    if tool == "mx-smi":
        return mx_smi(base, argv, sys.stdout, sys.stderr)
    sys.stderr.write(f"{tool}: not a fake tool\n")
    return errno.ENOENT
