"""`./run demo` (README quick start, issue 26 item 1): the operator and every node agent in one process.

Covers: the whole scenario (install, labels and allocatable, a driver-config VF change, vfio binding, a
workload's METAX_MACA_VERSION, a driver upgrade whose canary fails to load, the fallback, confirm, uninstall)
exits 0 on two nodes, and afterwards every fake host is byte-identical to its start, read from the hosts
themselves (`metax_hw_fake.snapshot`), with the one directory docs/operator.md says stays (R-INSTALL); a fault
the scenario does not expect (vfio-pci refuses a GPU) makes its step fail and the demo exit non-zero.
"""

from __future__ import annotations

import errno

import pytest

from metax_dev import demo
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import scenario
from metax_hw_fake import snapshot


def test_the_scenario_passes_and_every_host_is_as_it_was_found(capsys: pytest.CaptureFixture[str]) -> None:
    changed: dict[str, list[str]] = {}
    modules: dict[str, str | None] = {}

    def watch_hosts(f: demo_fleet.Fleet) -> None:
        original = f.stop

        def stop() -> None:
            original()
            for n in f.nodes:  # read from the hosts themselves, before the demo removes its directory
                changed[n.name] = snapshot.diff({**n.before, **scenario.STAYS}, snapshot.take(n.fake.root))
                modules[n.name] = n.fake.module_version("metax")

        f.stop = stop  # type: ignore[method-assign]

    assert demo.main(["--no-live", "--nodes", "2"], prepare=watch_hosts) == 0
    out = capsys.readouterr().out
    assert changed == {"gpu-node-1": [], "gpu-node-2": []}
    assert modules == {"gpu-node-1": demo_fleet.HOST_DRIVER, "gpu-node-2": demo_fleet.HOST_DRIVER}
    assert "Failed=True (StepFailed)" in out and "(gpu-node-1)" in out  # the canary's refused driver was seen
    assert "METAX_MACA_VERSION=maca-2.18 -> MXMACA 2.18.0.10" in out  # R-MACA: newest 2.18, numerically
    assert "9/9 Uninstall" in out and "Done in" in out


def test_a_step_that_does_not_reach_its_outcome_fails_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    def break_vfio(f: demo_fleet.Fleet) -> None:
        first = f.nodes[0].fake
        first.refuse_bind(first.gpu_addresses()[0], "vfio-pci", errno.EINVAL)

    assert demo.main(["--no-live", "--nodes", "2"], prepare=break_vfio) == 1
    out = capsys.readouterr().out
    assert "step failed" in out and "a GPU failed to bind" in out
    assert "5/9" not in out  # nothing after the failed step runs
