"""driver-manager and a payload with modules for several kernels (issue 21 item 5; R-DRIVER, R-READY).

Covers: the module whose vermagic is the running kernel's is staged under its release and loaded, the others
are not; after a kernel update the payload covers no more (one Warning Event ``KernelNotCovered`` naming the
running kernel and the covered ones, not ready, the readinessProbe file absent, the running driver kept, the
kernel never asked to load the wrong module, no exception, no Event per round); a later payload that covers
the kernel is picked up; the layout round-trips through the writer the build tooling uses.
"""

from __future__ import annotations

import pathlib
import shutil

from metax_core.node import payload_layout, readiness
from metax_core.wire import event_reasons
from metax_dev import kpayload as payload_build
from metax_hw import driver_payload
from metax_hw_fake import builder
from services.driver_manager import agent, bootstrap, config

from .conftest import NAMESPACE, NODE, PAYLOAD_VERSION, Node, make_node, write_payload

RUNNING = "6.1.0-57-amd64"
OLDER = "6.1.0-56-amd64"
NEWER = "6.12.117+deb12-amd64"


def manager(n: Node, tmp_path: pathlib.Path, **overrides: object) -> agent.DriverManager:
    values: dict[str, object] = {
        "node_name": NODE,
        "host_root": n.root,
        "namespace": NAMESPACE,
        "payload_version": PAYLOAD_VERSION,
        "payload_dir": str(n.payload),
        "host_module_tools": False,
        "probe_file": str(tmp_path / "ready"),
        **overrides,
    }
    settings = config.Settings(**values)  # type: ignore[arg-type]
    return bootstrap.bootstrap(settings, hw=agent.Hardware.of(n.fake.hw), ports=n.ports("driver"), clock=n.clock)


def node(tmp_path: pathlib.Path, *, loaded: bool = False) -> Node:
    spec = builder.FakeHostBuilder().gpus(2).host_driver("2.18.0", loaded=loaded).kernel_release(RUNNING)
    return make_node(tmp_path, spec)


def signal(n: Node) -> readiness.ComponentReadiness:
    return n.board.read_all()["driver"]


def staged(n: Node, release: str) -> pathlib.Path:
    return n.root / payload_layout.host_module_path(PAYLOAD_VERSION, release).lstrip("/")


def test_the_running_kernels_module_is_chosen_from_several(tmp_path: pathlib.Path) -> None:
    n = node(tmp_path)
    shutil.rmtree(n.payload)
    write_payload(n.payload, kernels=[OLDER, RUNNING, NEWER])
    (n.payload / "driver" / "not a release").mkdir()  # no kernel release names a directory so: ignored
    manager(n, tmp_path).tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION and signal(n).ready, signal(n).reason
    assert staged(n, RUNNING).is_file() and not staged(n, OLDER).exists() and not staged(n, NEWER).exists()
    assert n.fake.modules.file_vermagic(str(staged(n, RUNNING))).release == RUNNING
    assert (tmp_path / "ready").is_file()


def test_a_kernel_the_payload_does_not_cover_is_one_event_and_a_not_ready_driver(tmp_path: pathlib.Path) -> None:
    n = node(tmp_path, loaded=True)  # the host's 2.18.0 runs; the node was updated to a kernel the image lacks
    shutil.rmtree(n.payload)
    write_payload(n.payload, kernels=[OLDER, NEWER])
    m = manager(n, tmp_path)
    for _ in range(3):
        m.tick()
        n.clock.advance(600)
        m.wake()
    s = signal(n)
    assert not s.ready and f"running kernel {RUNNING}" in s.reason
    assert OLDER in s.reason and NEWER in s.reason, s.reason
    assert not (tmp_path / "ready").exists()  # the pod is Running and not Ready
    assert n.fake.module_version("metax") == "2.18.0"  # the running driver is kept: never a wrong module
    assert not any("version magic" in line for line in n.fake.dmesg())  # the kernel was never asked
    assert not staged(n, OLDER).exists() and not staged(n, RUNNING).exists()
    refusals = [e for e in n.events() if e.get("reason") == event_reasons.KERNEL_NOT_COVERED]
    assert len(refusals) == 1, refusals  # one Event, not one per round
    assert refusals[0]["type"] == "Warning" and RUNNING in refusals[0]["note"] and OLDER in refusals[0]["note"]

    write_payload(n.payload, kernels=[RUNNING])  # a driver image that covers the new kernel
    n.clock.advance(600)
    m.wake()
    m.tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION and signal(n).ready, signal(n).reason
    assert (tmp_path / "ready").is_file()
    assert n.fake.audit() == []


def test_a_module_filed_under_the_wrong_release_is_not_loaded(tmp_path: pathlib.Path) -> None:
    n = node(tmp_path)
    shutil.rmtree(n.payload)
    write_payload(n.payload, kernels=[OLDER])
    (n.payload / payload_layout.module_relpath(OLDER)).parent.rename(n.payload / "driver" / RUNNING)
    manager(n, tmp_path).tick()
    assert n.fake.modules.state("metax") is None
    assert f"covers {OLDER} " in signal(n).reason and not signal(n).ready


def test_the_build_toolings_layout_is_what_driver_manager_reads(tmp_path: pathlib.Path) -> None:
    """Round trip: `metax_dev.payload.assemble` (the test payload image's writer) → driver-manager's reader."""
    n = node(tmp_path)
    built = tmp_path / "built"
    for release in (OLDER, RUNNING):
        write_payload(built / release, kernels=[release])
    shutil.rmtree(n.payload)
    payload_build.assemble(n.payload, {r: built / r / payload_layout.module_relpath(r) for r in (OLDER, RUNNING)})
    found = {m.location: m.vermagic for m in driver_payload.payload_modules(n.payload, n.fake.modules.file_vermagic)}
    assert {k: v.release if v else None for k, v in found.items()} == {OLDER: OLDER, RUNNING: RUNNING}
    manager(n, tmp_path).tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION and signal(n).ready
