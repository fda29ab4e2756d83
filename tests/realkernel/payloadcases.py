"""driver-manager's payload path on a real kernel (issue 21 item 5): run inside the QEMU guest by `guest`.

Why: the vermagic choice, the staging under ``/var/lib/metax/drivers/<version>/<release>/`` and the insmod with
driver-config's parameters must meet the kernel the payload was built for. The guest gets two payloads, each
unpacked from its OCI archive (`metax_dev.kpayload`) the way the driver pod's init container copies it:
``foreign`` holds only a module built against the previous ABI's headers, ``covering`` one for the booted
kernel and one for that previous ABI. The project's own driver-manager round (`services.driver_manager`) runs
on ``/`` with the real adapter (kmod's tools), an in-memory cluster standing in for the API server (the guest
has no network) and a hand-moved clock. Cases, in order, on one driver-manager:

1. ``refuses_a_module_for_another_kernel``: with ``foreign`` nothing is loaded (``/sys/module/metax`` absent),
   the driver is not ready and says which kernel runs and which one the payload covers, the probe file is
   absent, three rounds give one ``KernelNotCovered`` Event;
2. ``loads_the_running_kernels_module``: the payload directory now holds ``covering``: the next round stages the
   booted kernel's module, insmods it, and ``/sys/module/metax/parameters/*`` show driver-config's values.

A fact is recorded too (not asserted): what the kernel itself says when the foreign module is insmodded by
hand (with modversions it compares symbol CRCs, not the release, so it may well accept it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from metax_core.node import payload_layout, readiness
from metax_core.wire import event_reasons
from metax_hw import host, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.driver_manager import agent, bootstrap, config

NODE = "realkernel-guest"
NAMESPACE = "metax-operator"
VERSION = "2.20.0"
PARAMS = {"xcore_page_size": "14", "gpu_model": "3"}
PAYLOAD = Path("/tmp/payload")
PROBE = Path("/tmp/driver-ready")
CASES = ("refuses_a_module_for_another_kernel", "loads_the_running_kernels_module")


class Clock:
    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


class Rig:
    def __init__(self, payloads: Path) -> None:
        self.payloads = payloads
        self.release = os.uname().release
        self.k8s = inmemory.InMemoryCluster()
        self.k8s.add_node(NODE)
        self.k8s.objects.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, field_manager="t"
        )
        params = "".join(f"{k}: {v}\n" for k, v in PARAMS.items())
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "driver-config", "namespace": NAMESPACE}}
        self.k8s.objects.apply({**body, "data": {"module-params": params}}, field_manager="admin", force=True)
        self.clock = Clock()
        settings = config.Settings(
            node_name=NODE,
            host_root=Path("/"),
            namespace=NAMESPACE,
            payload_version=VERSION,
            payload_dir=str(PAYLOAD),
            host_module_tools=False,
            probe_file=str(PROBE),
        )
        hw = agent.Hardware.of(host.open_host("/", net_source=host.NetSource.SYSFS))
        self.manager = bootstrap.bootstrap(
            settings, hw=hw, ports=cluster.in_memory(self.k8s, "driver", NODE), clock=self.clock
        )

    def use_payload(self, name: str) -> None:
        if PAYLOAD.exists():
            shutil.rmtree(PAYLOAD)
        shutil.copytree(self.payloads / name, PAYLOAD)

    def round(self) -> None:
        self.clock.now += 600
        self.manager.wake()
        self.manager.tick()

    def signal(self) -> readiness.ComponentReadiness:
        return hostfiles.FileReadinessBoard(Path("/")).read_all()["driver"]

    def events(self, reason: str) -> list[Mapping[str, Any]]:
        items = self.k8s.objects.list("events.k8s.io/v1", "Event", "default").items
        return [e for e in items if e.get("reason") == reason]

    def foreign_release(self) -> str:
        others = [d.name for d in (self.payloads / "foreign" / "driver").iterdir() if d.name != self.release]
        return others[0]


def _sys(*parts: str) -> str | None:
    path = Path("/sys/module/metax", *parts)
    return path.read_text().strip() if path.exists() else None


def refuses_a_module_for_another_kernel(rig: Rig) -> str:
    rig.use_payload("foreign")
    other = rig.foreign_release()
    for _ in range(3):
        rig.round()
    assert not Path("/sys/module/metax").exists(), "a module built for another kernel was loaded"
    signal = rig.signal()
    assert not signal.ready, signal.reason
    assert f"running kernel {rig.release}" in signal.reason and other in signal.reason, signal.reason
    assert not PROBE.exists(), "the readiness probe file exists for a refused payload"
    refusals = rig.events(event_reasons.KERNEL_NOT_COVERED)
    assert len(refusals) == 1, f"{len(refusals)} KernelNotCovered Events after 3 rounds"
    staged = Path(payload_layout.host_module_path(VERSION, rig.release))
    assert not staged.exists(), f"{staged} was staged for a payload that does not cover the kernel"
    return signal.reason


def loads_the_running_kernels_module(rig: Rig) -> str:
    rig.use_payload("covering")
    rig.round()
    signal = rig.signal()
    assert signal.ready, signal.reason
    seen = {p: _sys("parameters", p) for p in PARAMS}
    assert seen == PARAMS, f"/sys/module/metax/parameters show {seen}, driver-config asked {PARAMS}"
    assert _sys("version") == VERSION, _sys("version")
    assert PROBE.exists(), "no readiness probe file for a loaded driver"
    staged = Path(payload_layout.host_module_path(VERSION, rig.release))
    assert staged.is_file(), f"{staged} missing"
    shown = subprocess.run(["modinfo", "-F", "vermagic", str(staged)], capture_output=True, text=True, check=True)
    assert shown.stdout.split()[0] == rig.release, shown.stdout
    assert rig.events(event_reasons.DRIVER_READY), "no DriverReady Event"
    return f"parameters {seen}, version {VERSION}, staged {staged}"


def forced_foreign_insmod(rig: Rig) -> dict[str, object]:
    """What the kernel itself does with the foreign module (the fact; driver-manager never asks it)."""
    module = rig.payloads / "foreign" / "driver" / rig.foreign_release() / payload_layout.MODULE_FILE
    done = subprocess.run(["insmod", str(module)], capture_output=True, text=True, check=False)
    loaded = Path("/sys/module/metax").exists()
    if loaded:
        subprocess.run(["rmmod", "metax"], capture_output=True, check=False)
    dmesg = subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout.splitlines()
    return {
        "rc": done.returncode,
        "stderr": done.stderr.strip()[-300:],
        "loaded": loaded,
        "dmesg": [line for line in dmesg if "metax" in line][-3:],
    }


RUNNERS: dict[str, Callable[[Rig], str]] = {
    "refuses_a_module_for_another_kernel": refuses_a_module_for_another_kernel,
    "loads_the_running_kernels_module": loads_the_running_kernels_module,
}


def run_all(payloads: Path, say: Callable[[dict[str, object]], None]) -> None:
    try:
        rig = Rig(payloads)
    except Exception as exc:
        say({"payload_error": f"{type(exc).__name__}: {exc}"})
        return
    for name in CASES:
        started = time.monotonic()
        try:
            ok, message = True, RUNNERS[name](rig)
        except Exception as exc:
            ok, message = False, f"{type(exc).__name__}: {exc}"
        say({"payload_case": name, "ok": ok, "message": message, "seconds": round(time.monotonic() - started, 2)})
    subprocess.run(["rmmod", "metax"], capture_output=True, check=False)
    try:
        say({"forced_foreign_insmod": forced_foreign_insmod(rig)})
    except Exception as exc:
        say({"forced_foreign_insmod": f"{type(exc).__name__}: {exc}"})
