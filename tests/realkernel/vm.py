"""One QEMU boot of the cached kernel that runs the in-guest program and returns what it printed.

Why: the real-kernel cases need a kernel with SR-IOV, vfio-pci and an IOMMU, which this machine's kernel does
not lend us. The guest is a q35 machine with an Intel IOMMU (one IOMMU group per VF) and QEMU's NVMe
controller with SR-IOV behind a PCIe root port; no network (``-nic none``). Its root is a small initramfs
(busybox, the boot modules, an init script); the project's Python comes over 9p, read-only, at the same paths
as on this host (``/usr``, the interpreter's prefix, the virtualenv's site-packages, a staged copy of our
packages), so the guest runs exactly the code under test. Results come back on the serial console as
``@@RK`` marker lines. Every boot is bounded by a timeout; TCG is used whenever KVM cannot run the kernel.
"""

from __future__ import annotations

import io
import os
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from tests.realkernel import kernel

MARKER = "@@RK "
BOOT_TIMEOUT = float(os.environ.get("METAX_REALKERNEL_TIMEOUT", "300"))
"""Seconds one boot may take (a TCG boot with every case took 25-75 s on a loaded 2-core machine)."""
NVME_IDS = (0x1B36, 0x0010)
"""QEMU's emulated NVMe controller (PF and VFs): the device the adapter manages in the guest."""
MAX_VFS = 3

_STAGED_PACKAGES = ("metax_core", "metax_hw", "metax_k8s", "services")
_REPO = Path(__file__).resolve().parents[2]


@attrs.frozen
class Share:
    tag: str
    host: Path
    """Mounted at the same path in the guest."""


@attrs.frozen
class Boot:
    console: str
    seconds: float
    accel: str
    exit_code: int | None


def choose_accel() -> str:
    """``kvm`` when /dev/kvm opens and the CPU offers VMX/SVM (a paravirtual /dev/kvm without them hangs a
    stock kernel in early boot), else ``tcg``. ``METAX_REALKERNEL_ACCEL`` overrides."""
    forced = os.environ.get("METAX_REALKERNEL_ACCEL")
    if forced:
        return forced
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError:
        return "tcg"
    os.close(fd)
    flags = Path("/proc/cpuinfo").read_text()
    return "kvm" if (" vmx" in flags or " svm" in flags) else "tcg"


def stage(target: Path, extra: Mapping[str, Path] | None = None) -> Path:
    """A copy of the packages the guest imports (ours only; third-party ones come from site-packages), and
    ``extra`` directories (name → source) next to them, e.g. the test payloads."""
    for name, source in (extra or {}).items():
        shutil.copytree(source, target / name, symlinks=True)
    for package in _STAGED_PACKAGES:
        shutil.copytree(_REPO / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    guest = target / "tests" / "realkernel"
    guest.mkdir(parents=True)
    for source in (_REPO / "tests" / "realkernel").glob("*.py"):
        shutil.copy2(source, guest / source.name)
    return target


def shares(staged: Path) -> list[Share]:
    """Host directories the guest needs, outermost first, without nested duplicates."""
    wanted = [
        Path("/usr"),
        Path(sys.base_prefix),
        *(Path(p) for p in site.getsitepackages()),
        Path(sysconfig.get_paths()["purelib"]),
        staged,
    ]
    chosen: list[Path] = []
    for path in wanted:
        real = path.resolve()
        if real.is_dir() and not any(real == c or real.is_relative_to(c) for c in chosen):
            chosen.append(real)
    return [Share(f"rk{i}", p) for i, p in enumerate(chosen)]


def _cpio_entry(out: io.BytesIO, name: str, mode: int, data: bytes = b"", ino: int = 0) -> None:
    """One newc cpio header + name + data, each padded to 4 bytes."""
    encoded = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
    out.write(b"070701" + b"".join(f"{f:08x}".encode() for f in fields) + encoded)
    out.write(b"\0" * (-(110 + len(encoded)) % 4))
    out.write(data)
    out.write(b"\0" * (-len(data) % 4))


def initramfs(
    k: kernel.Kernel,
    mounts: Sequence[Share],
    command: Sequence[str],
    env: dict[str, str],
    boot_modules: Sequence[str] = kernel.BOOT_MODULES,
) -> bytes:
    """busybox, the kernel's cached module tree, kmod tool links and an init script that runs ``command``."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    out = io.BytesIO()
    counter = iter(range(1, 1_000_000))
    directory, link, regular = stat.S_IFDIR | 0o755, stat.S_IFLNK | 0o777, stat.S_IFREG | 0o755
    for name in ("bin", "sbin", "dev", "proc", "sys", "tmp", "run", "etc", "lib", "usr"):
        _cpio_entry(out, name, directory, ino=next(counter))
    _cpio_entry(out, "bin/busybox", regular, Path(busybox).read_bytes(), next(counter))
    _cpio_entry(out, "lib64", link, b"usr/lib64", next(counter))
    _cpio_entry(out, "lib/x86_64-linux-gnu", link, b"/usr/lib/x86_64-linux-gnu", next(counter))
    for tool in ("modprobe", "rmmod", "insmod", "modinfo", "lsmod", "depmod"):
        _cpio_entry(out, f"sbin/{tool}", link, b"/usr/bin/kmod", next(counter))
    base = k.directory
    for parent in reversed(k.modules.relative_to(base).parents[:-1]):
        if str(parent) != "lib":
            _cpio_entry(out, str(parent), directory, ino=next(counter))
    _cpio_entry(out, str(k.modules.relative_to(base)), directory, ino=next(counter))
    for path in sorted(k.modules.rglob("*")):
        name = str(path.relative_to(base))
        if path.is_dir():
            _cpio_entry(out, name, directory, ino=next(counter))
        else:
            _cpio_entry(out, name, stat.S_IFREG | 0o644, path.read_bytes(), next(counter))
    lines = [
        "#!/bin/busybox sh",
        "/bin/busybox --install -s /bin",
        "export PATH=/sbin:/usr/sbin:/usr/bin:/bin",
        "mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev",
        "mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /run",
        f'echo \'{MARKER}{{"init": "up"}}\'',
    ]
    for module in k.boot_module_files(boot_modules):
        lines.append(
            f'insmod /{module.relative_to(base)} || echo \'{MARKER}{{"init": "insmod {module.name} failed"}}\''
        )
    for share in mounts:
        lines.append(
            f"mkdir -p {share.host} && mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,"
            f'msize=512000 {share.tag} {share.host} || echo \'{MARKER}{{"init": "mount {share.tag} failed"}}\''
        )
    exports = " ".join(f"{key}='{value}'" for key, value in sorted(env.items()))
    lines += [
        f'echo \'{MARKER}{{"init": "ready"}}\'',
        "cd /tmp",
        f"env {exports} {' '.join(command)}",
        f'echo "{MARKER}{{\\"exit\\": $?}}"',
        "poweroff -f",
    ]
    _cpio_entry(out, "init", regular, ("\n".join(lines) + "\n").encode(), next(counter))
    _cpio_entry(out, "TRAILER!!!", 0)
    return out.getvalue()


def qemu_argv(k: kernel.Kernel, initrd: Path, console: Path, mounts: Sequence[Share], accel: str) -> list[str]:
    argv = [
        "qemu-system-x86_64",
        "-machine",
        f"q35,accel={accel}" + (",kernel-irqchip=split" if accel == "kvm" else ""),
        "-cpu",
        "max" if accel == "tcg" else "host",
        "-m",
        "1024",
        "-smp",
        "1",
        "-nic",
        "none",
        "-no-reboot",
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        f"file:{console}",
        "-kernel",
        str(k.vmlinux),
        "-initrd",
        str(initrd),
        "-append",
        "console=ttyS0 quiet loglevel=1 intel_iommu=on panic=-1 rdinit=/init",
        "-device",
        "intel-iommu,intremap=on,caching-mode=on",
        "-device",
        "pcie-root-port,id=rp1,chassis=1,slot=1",
        "-device",
        "nvme-subsys,id=subsys0,nqn=metax-realkernel",
        "-device",
        (
            f"nvme,serial=rk0,subsys=subsys0,bus=rp1,sriov_max_vfs={MAX_VFS},"
            f"sriov_vq_flexible={2 * MAX_VFS},sriov_vi_flexible={MAX_VFS},max_ioqpairs={2 * MAX_VFS + 2},"
            f"msix_qsize={MAX_VFS + 1}"
        ),
    ]
    for share in mounts:
        argv += [
            "-fsdev",
            f"local,id={share.tag},path={share.host},security_model=none,readonly=on",
            "-device",
            f"virtio-9p-pci,fsdev={share.tag},mount_tag={share.tag}",
        ]
    return argv


def boot(
    k: kernel.Kernel,
    workdir: Path,
    command: Sequence[str],
    env: dict[str, str],
    timeout: float = BOOT_TIMEOUT,
    extra: Mapping[str, Path] | None = None,
) -> Boot:
    """Boot once, run ``command`` in the guest, power off; the console text is returned whatever happened.
    ``extra`` directories are staged (`stage`) and reach the guest read-only at the same path."""
    staged = stage(workdir / "stage", extra)
    mounts = shares(staged)
    initrd = workdir / "initramfs.cpio"
    python_path = [str(staged), *site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    guest_env = dict(
        env,
        PYTHONPATH=os.pathsep.join(dict.fromkeys(python_path)),
        PYTHONDONTWRITEBYTECODE="1",
        HOME="/tmp",
        PATH="/sbin:/usr/sbin:/usr/bin:/bin",
    )
    initrd.write_bytes(initramfs(k, mounts, command, guest_env))
    console = workdir / "console.log"
    accel = choose_accel()
    argv = qemu_argv(k, initrd, console, mounts, accel)
    (workdir / "qemu.argv").write_text("\n".join(argv) + "\n")
    started = time.monotonic()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        code = None
    seconds = time.monotonic() - started
    text = console.read_text(errors="replace") if console.exists() else ""
    if output:
        text += "\n[qemu] " + output.decode(errors="replace")
    if code is None:
        text += f"\n[harness] the guest did not power off within {timeout:g} s and was killed\n"
    return Boot(text, seconds, accel, code)
