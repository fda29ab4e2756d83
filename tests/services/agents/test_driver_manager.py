"""driver-manager on a fake host and the in-memory cluster (C5, R-DRIVER, R-MODPARAM, R-VF, R-FW, R-READY).

Covers: every deploy policy row on a node with and without a host driver; the payload copied atomically and
versioned; module parameters from driver-config (cluster and node entry) read back from sysfs, and a reload
when they change; VF counts set and verified, refused above sriov_totalvfs; readiness only when loaded and
every GPU answers; the host driver in use (Event, clear reason, back-off, no exception, current driver kept);
a load the kernel refuses; a new driver refused after the old one was unloaded: the previous driver back
with its parameters and VFs, not ready, an Event, also after a restart in between;
mx-smi hanging; a GPU off the bus; Never leaves the kernel alone; firmware per R-FW with NodeNeedReboot and
no second flash before the reboot; killed mid-action then restarted; a steady state that writes nothing.
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import attrs
import pytest

from metax_core.inventory import PciAddress
from metax_core.node import driver_plan, labels, payload_layout, readiness
from metax_core.spec import model as spec
from metax_hw_fake import builder
from services.driver_manager import agent, bootstrap, config

from .conftest import NAMESPACE, NODE, PAYLOAD_VERSION, Node, make_node, write_payload


def settings(n: Node, **overrides: object) -> config.Settings:
    values: dict[str, object] = {
        "node_name": NODE,
        "host_root": n.root,
        "namespace": NAMESPACE,
        "payload_version": PAYLOAD_VERSION,
        "payload_dir": str(n.payload),
        "host_module_tools": False,
        "interval": 30.0,
        **overrides,
    }
    return config.Settings(**values)  # type: ignore[arg-type]


def manager(n: Node, **overrides: object) -> agent.DriverManager:
    return bootstrap.bootstrap(
        settings(n, **overrides), hw=agent.Hardware.of(n.fake.hw), ports=n.ports("driver"), clock=n.clock
    )


def driver_signal(n: Node) -> readiness.ComponentReadiness:
    return n.board.read_all()["driver"]


def host(gpus: int = 2, *, version: str | None = "2.18.0", loaded: bool = True) -> builder.FakeHostBuilder:
    return builder.FakeHostBuilder().gpus(gpus).host_driver(version, loaded=loaded)


# --- deploy policy (Table 3.5) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "host_version", "loaded", "expected"),
    [
        (spec.DeployPolicy.PREFER_CLOUD, "2.18.0", True, PAYLOAD_VERSION),
        (spec.DeployPolicy.PREFER_CLOUD, None, False, PAYLOAD_VERSION),
        (spec.DeployPolicy.PREFER_HOST, "2.18.0", False, "2.18.0"),
        (spec.DeployPolicy.PREFER_HOST, None, False, PAYLOAD_VERSION),
        (spec.DeployPolicy.PREFER_NEWER, "2.30.1", False, "2.30.1"),
        (spec.DeployPolicy.PREFER_NEWER, "2.18.0", True, PAYLOAD_VERSION),
        (spec.DeployPolicy.PREFER_NEWER, None, False, PAYLOAD_VERSION),
    ],
)
def test_each_policy_row_loads_the_chosen_driver_and_reports_ready(
    tmp_path: pathlib.Path, policy: spec.DeployPolicy, host_version: str | None, loaded: bool, expected: str
) -> None:
    n = make_node(tmp_path, host(version=host_version, loaded=loaded))
    m = manager(n, deploy_policy=policy)
    m.tick()
    assert n.fake.module_version("metax") == expected
    signal = driver_signal(n)
    assert signal.ready and signal.version == expected, signal.reason
    assert n.labels()[agent.DRIVER_READY_LABEL] == "true"
    assert n.labels()[agent.DRIVER_VERSION_LABEL] == expected
    assert n.labels()["team"] == "ml"  # another writer's label stays
    if expected == PAYLOAD_VERSION:
        release = n.fake.modules.running_kernel().release
        assert (n.root / payload_layout.host_module_path(PAYLOAD_VERSION, release).lstrip("/")).is_file()


def test_never_leaves_the_kernel_alone(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(version="2.18.0", loaded=False))
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 2\n"})
    m = manager(n, deploy_policy=spec.DeployPolicy.NEVER, payload_version=None)
    m.tick()
    assert n.fake.module_version("metax") is None
    assert n.fake.vfs_of(n.fake.gpu_addresses()[0]) == []
    signal = driver_signal(n)
    assert not signal.ready and "deployPolicy Never" in signal.reason
    assert agent.DRIVER_READY_LABEL not in n.labels()


def test_never_with_a_loaded_host_driver_is_ready_without_touching_it(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(version="2.18.0", loaded=True))
    before = n.fake.dmesg()
    manager(n, deploy_policy=spec.DeployPolicy.NEVER, payload_version=None).tick()
    assert n.fake.dmesg() == before
    assert driver_signal(n).ready


# --- module parameters and VFs from driver-config ----------------------------------------------------------


def test_module_params_from_driver_config_are_read_back_and_a_change_reloads(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.config_map("driver-config", {"module-params": "xcore_page_size: 10\n"})
    m = manager(n)
    m.tick()
    assert n.fake.module_params("metax")["xcore_page_size"] == "10"
    n.config_map(
        "driver-config",
        {"module-params": "xcore_page_size: 10\n", "node-module-params": f"{NODE}:\n  xcore_page_size: 12\n"},
    )
    m.wake()
    m.tick()
    assert n.fake.module_params("metax")["xcore_page_size"] == "12"
    assert driver_signal(n).ready


def test_a_removed_param_reloads_to_the_driver_default(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.config_map("driver-config", {"module-params": "xcore_page_size: 12\n"})
    m = manager(n)
    m.tick()
    n.config_map("driver-config", {"module-params": ""})
    m.wake()
    m.tick()
    assert n.fake.module_params("metax")["xcore_page_size"] != "12"


def test_vf_count_is_set_verified_and_changed_through_the_adapter(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 4\n"})
    m = manager(n)
    m.tick()
    assert [len(n.fake.vfs_of(pf)) for pf in n.fake.gpu_addresses()] == [4, 4]
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 2\n"})
    m.wake()
    m.tick()
    assert [len(n.fake.vfs_of(pf)) for pf in n.fake.gpu_addresses()] == [2, 2]
    assert driver_signal(n).ready
    assert n.fake.audit() == []


def test_the_driver_signal_is_withdrawn_while_vf_counts_change(tmp_path: pathlib.Path) -> None:
    """gpu-device must never offer a half-changed inventory (docs/device-plugin.md, O1): at every VF-count write
    the driver's signal on the board says not ready; after the round it is ready again, as a new write."""
    n = make_node(tmp_path, host(loaded=False))
    m = manager(n)
    m.tick()
    ready_before = driver_signal(n)
    assert ready_before.ready and ready_before.sequence is not None
    seen: list[readiness.ComponentReadiness] = []
    binder = m.hw.binder
    real_set = binder.set_vf_count

    def set_vf_count(pf: PciAddress, count: int) -> None:
        seen.append(driver_signal(n))
        real_set(pf, count)

    binder.set_vf_count = set_vf_count  # type: ignore[method-assign]
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 2\n"})
    m.wake()
    m.tick()
    assert len(seen) >= 2
    assert all(not s.ready and "setting 2 VF(s) per GPU" in s.reason for s in seen)
    after = driver_signal(n)
    assert after.ready and after.sequence is not None and after.sequence > ready_before.sequence


def test_vf_count_above_what_the_gpu_supports_is_refused_and_not_ready(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 64\n"})
    manager(n).tick()
    signal = driver_signal(n)
    assert not signal.ready and "supports at most 16 VFs" in signal.reason
    assert "VfCountRefused" in n.reasons()


def test_an_invalid_driver_config_keeps_the_last_valid_one_and_says_why(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.config_map("driver-config", {"module-params": "xcore_page_size: 10\n"})
    m = manager(n)
    m.tick()
    n.config_map("driver-config", {"module-params": "xcore_page_sise: 12\n"})
    m.wake()
    m.tick()
    assert n.fake.module_params("metax")["xcore_page_size"] == "10"
    assert "InvalidDriverConfig" in n.reasons()


# --- faults ----------------------------------------------------------------------------------------------


def test_host_driver_in_use_reports_backs_off_and_keeps_the_current_driver(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(version="2.18.0", loaded=True))
    n.fake.add_process(n.fake.gpu_addresses()[0], 4242, "python")
    m = manager(n)
    m.tick()  # no exception: no crash loop
    assert n.fake.module_version("metax") == "2.18.0"
    signal = driver_signal(n)
    assert not signal.ready and "cannot unload metax 2.18.0" in signal.reason and "back-off" in signal.reason
    assert driver_plan.HOST_DRIVER_IN_USE in n.reasons()
    n.clock.advance(31)
    m.tick()  # within the back-off: no second attempt, no second Event object
    assert n.reasons().count(driver_plan.HOST_DRIVER_IN_USE) == 1
    n.fake.clear_processes()
    n.clock.advance(600)
    m.tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION
    assert driver_signal(n).ready


def test_held_module_is_treated_like_a_built_in_driver(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(version="2.18.0", loaded=True))
    n.fake.hold_module("metax")
    manager(n).tick()
    assert n.fake.module_version("metax") == "2.18.0"
    assert not driver_signal(n).ready


def test_a_load_the_kernel_refuses_is_reported_and_retried(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.fake.fail_module_load("metax")
    m = manager(n)
    m.tick()
    signal = driver_signal(n)
    assert not signal.ready and "cannot load metax" in signal.reason
    assert driver_plan.DRIVER_LOAD_FAILED in n.reasons()
    n.fake.clear_faults()
    n.clock.advance(600)
    m.tick()
    assert driver_signal(n).ready


def test_mx_smi_hanging_is_not_ready_not_a_hang(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False), timeout=1.0)
    n.fake.break_mx_smi("hang")
    manager(n).tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION
    signal = driver_signal(n)
    assert not signal.ready and "health check failed" in signal.reason


def test_a_gpu_off_the_bus_makes_the_driver_not_ready(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    m = manager(n)
    m.tick()
    assert driver_signal(n).ready
    gone = n.fake.gpu_addresses()[1]
    n.fake.fall_off_bus(gone)
    m.wake()
    m.tick()
    signal = driver_signal(n)
    assert not signal.ready and gone in signal.reason
    assert agent.DRIVER_READY_LABEL not in n.labels()


def test_missing_payload_is_a_clear_reason(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    shutil.rmtree(n.payload)
    manager(n).tick()
    assert "the payload has no metax.ko" in driver_signal(n).reason


# --- restartable -----------------------------------------------------------------------------------------


def test_killed_mid_copy_then_restarted_converges(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    release = n.fake.modules.running_kernel().release
    partial = n.root / f"var/lib/metax/drivers/{PAYLOAD_VERSION}/.{release}.x.partial"
    partial.mkdir(parents=True)
    (partial / "metax.ko").write_text("half")
    manager(n).tick()
    assert not partial.exists()
    assert driver_signal(n).ready


def test_killed_between_unload_and_load_then_restarted_converges(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(version="2.18.0", loaded=True))
    n.fake.modules.unload("metax")  # what the killed agent had done
    manager(n).tick()
    assert n.fake.module_version("metax") == PAYLOAD_VERSION


def test_killed_mid_vf_change_then_restarted_converges(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 4\n"})
    manager(n).tick()
    first = n.fake.gpu_addresses()[0]
    n.fake.binder.set_vf_count(first, 0)  # killed after the write through zero
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 2\n"})
    manager(n).tick()
    assert [len(n.fake.vfs_of(pf)) for pf in n.fake.gpu_addresses()] == [2, 2]


def test_steady_state_writes_nothing(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    n.config_map("driver-config", {"node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 2\n"})
    m = manager(n)
    m.tick()
    writes, dmesg, signals = n.writes(), len(n.fake.dmesg()), m.publisher.signal_writes
    for _ in range(5):
        n.clock.advance(31)
        m.tick()
    assert (n.writes(), len(n.fake.dmesg()), m.publisher.signal_writes) == (writes, dmesg, signals)
    assert m.publisher.patches == 1


# --- firmware (R-FW) --------------------------------------------------------------------------------------


class _Watched:
    """The firmware port, recording the node's edit-lock label at each flash."""

    def __init__(self, port: Any, n: Node) -> None:
        self.port, self.n, self.locks = port, n, []

    def info(self) -> Any:
        return self.port.info()

    def flash(self, target: Any, image: Any) -> None:
        self.locks.append(self.n.labels().get(labels.FIRMWARE_FLASHING))
        self.port.flash(target, image)


def test_firmware_flashed_once_with_node_need_reboot(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False).vbios("1.13.0.0"))
    write_payload(n.payload, firmware="1.14.0.0")
    m = manager(n, fw_upgrade_policy=spec.FirmwarePolicy.PREFER_CLOUD, fw_enable_virt=True)
    watched = m.firmware.firmware = _Watched(m.firmware.firmware, n)
    m.tick()
    assert [n.fake.vbios(a) for a in n.fake.gpu_addresses()] == [("1.13.0.0", "1.14.0.0")] * 2
    assert watched.locks == [labels.TRUE, labels.TRUE]  # the webhook's edit lock, before every flash (R-FW)
    assert labels.FIRMWARE_FLASHING not in n.labels()  # and gone once the flash is over
    assert "NodeNeedReboot" in n.reasons()
    events = [e for e in n.events() if e["reason"] == "NodeNeedReboot"]
    assert events[0]["note"] == "firmware upgrade done, need reboot machine to take effect"
    assert events[0]["type"] == "Normal"  # as seed 001 §3.2.9 shows it (issue 41 item 4)
    n.clock.advance(31)
    m.tick()  # not flashed again before the reboot
    assert m.firmware.last is not None and len(n.events()) == len(events) + 1  # DriverReady + NodeNeedReboot
    n.fake.reboot_firmware()
    n.clock.advance(31)
    m.tick()
    assert m.firmware.last is not None and m.firmware.last.outcome.value == "skip"


def test_firmware_refused_while_gpu_workloads_run(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(version="2.20.0", loaded=True).vbios("1.13.0.0"))
    write_payload(n.payload, firmware="1.14.0.0")
    n.fake.add_process(n.fake.gpu_addresses()[0], 7, "train.py")
    manager(n, fw_upgrade_policy=spec.FirmwarePolicy.PREFER_CLOUD).tick()
    assert n.fake.vbios(n.fake.gpu_addresses()[0]) == ("1.13.0.0", None)
    assert driver_plan.FIRMWARE_REFUSED in n.reasons()


def test_firmware_refused_across_the_vbios_boundary(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False).vbios("1.11.0.0"))
    write_payload(n.payload, firmware="1.14.0.0")
    n.fake.set_gpu(n.fake.gpu_addresses()[1], vbios="1.13.0.0")
    manager(n, fw_upgrade_policy=spec.FirmwarePolicy.PREFER_CLOUD).tick()
    assert driver_plan.FIRMWARE_REFUSED in n.reasons()
    assert n.fake.vbios(n.fake.gpu_addresses()[0])[1] is None


def test_a_failed_flash_is_an_event_and_nothing_is_recorded(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False).vbios("1.13.0.0"))
    write_payload(n.payload, firmware="1.14.0.0")
    n.fake.fail_flash()
    manager(n, fw_upgrade_policy=spec.FirmwarePolicy.PREFER_CLOUD).tick()
    assert driver_plan.FIRMWARE_FAILED in n.reasons()
    assert "NodeNeedReboot" not in n.reasons()
    assert labels.FIRMWARE_FLASHING not in n.labels()  # the edit lock goes with the failed flash


def test_firmware_refused_on_a_node_the_administrator_marks_interconnected_across_hosts(tmp_path: pathlib.Path) -> None:
    """Seed 001 §3.2.9: firmware upgrade does not support multi-host interconnects (issue 41 item 4)."""
    n = make_node(tmp_path, host(loaded=False).vbios("1.13.0.0"))
    write_payload(n.payload, firmware="1.14.0.0")
    n.k8s.api.merge_patch("v1", "Node", NODE, {"metadata": {"labels": {labels.MULTI_HOST_INTERCONNECT: labels.TRUE}}})
    manager(n, fw_upgrade_policy=spec.FirmwarePolicy.PREFER_CLOUD).tick()
    assert [n.fake.vbios(a)[1] for a in n.fake.gpu_addresses()] == [None, None]
    refused = [e for e in n.events() if e["reason"] == driver_plan.FIRMWARE_REFUSED]
    assert len(refused) == 1 and "across hosts" in refused[0]["note"], refused


def test_an_edit_lock_left_by_a_stopped_flash_is_removed(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False).vbios("1.14.0.0"))
    write_payload(n.payload, firmware="1.14.0.0")
    n.k8s.api.merge_patch("v1", "Node", NODE, {"metadata": {"labels": {labels.FIRMWARE_FLASHING: labels.TRUE}}})
    manager(n, fw_upgrade_policy=spec.FirmwarePolicy.PREFER_CLOUD).tick()
    assert labels.FIRMWARE_FLASHING not in n.labels()


# --- a new driver the kernel refuses: the previous one comes back ------------------------------------------

NEW_VERSION = "2.21.0"
OTHER_KERNEL = "6.8.0-31-generic"
INVALID = "Invalid module format"


def _running_ours(n: Node, tmp_path: pathlib.Path) -> None:
    """The node runs our payload driver 2.20.0 with xcore_page_size=11 and 2 VFs per GPU, ready."""
    n.config_map(
        "driver-config",
        {"module-params": "xcore_page_size: 11\n", "node-vfnums": f"nodes:\n  {NODE}:\n    vfnum: 2\n"},
    )
    manager(n, probe_file=str(tmp_path / "ready")).tick()
    assert driver_signal(n).ready and n.fake.module_version("metax") == PAYLOAD_VERSION
    assert (tmp_path / "ready").read_text().strip() == driver_signal(n).reason  # the readinessProbe passes
    shutil.rmtree(n.payload)
    write_payload(n.payload, NEW_VERSION)  # the new driver image, for this kernel, but the kernel refuses it
    n.fake.fail_module_load("metax", f"could not insert module: {INVALID}", version=NEW_VERSION)


def _on_the_previous_driver(n: Node) -> None:
    assert n.fake.module_version("metax") == PAYLOAD_VERSION
    assert n.fake.module_params("metax")["xcore_page_size"] == "11"
    assert [len(n.fake.vfs_of(pf)) for pf in n.fake.gpu_addresses()] == [2, 2]
    assert all(n.fake.driver_of(pf) == "metax" for pf in n.fake.gpu_addresses())


def test_a_new_driver_the_kernel_refuses_brings_the_previous_one_back(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    _running_ours(n, tmp_path)
    probe_file = tmp_path / "ready"
    m = manager(n, payload_version=NEW_VERSION, probe_file=str(probe_file))
    m.tick()
    _on_the_previous_driver(n)
    signal = driver_signal(n)
    assert not signal.ready
    assert f"metax {NEW_VERSION} failed to load" in signal.reason and "Invalid module format" in signal.reason
    assert f"restored the previous metax {PAYLOAD_VERSION} with xcore_page_size=11 and 4 VF(s)" in signal.reason
    assert not probe_file.exists()  # the pod is not Ready: the rollout sees the canary fail
    assert driver_plan.PREVIOUS_DRIVER_RESTORED in n.reasons() and driver_plan.DRIVER_LOAD_FAILED in n.reasons()
    assert n.labels().get(agent.DRIVER_VERSION_LABEL) is None
    assert n.fake.audit() == []
    n.clock.advance(600)  # the retry after the back-off fails the same way and restores again
    m.wake()
    m.tick()
    _on_the_previous_driver(n)
    assert not driver_signal(n).ready and not probe_file.exists()


def test_killed_between_the_unload_and_the_refused_load_then_restarted_restores(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(loaded=False))
    _running_ours(n, tmp_path)
    real = agent.Hardware.of(n.fake.hw)

    class Killed(BaseException):
        pass

    class DiesInInsmod:
        """The host's modules, but the agent is killed after the unload, before insmod returns."""

        def __getattr__(self, name: str) -> object:
            return getattr(real.modules, name)

        def load_file(self, path: str, params: object) -> None:
            raise Killed

    dying = attrs.evolve(real, modules=DiesInInsmod())
    m = bootstrap.bootstrap(settings(n, payload_version=NEW_VERSION), hw=dying, ports=n.ports("driver"), clock=n.clock)
    with pytest.raises(Killed):
        m.tick()
    assert n.fake.modules.state("metax") is None  # driverless while no driver-manager runs
    manager(n, payload_version=NEW_VERSION).tick()  # the restarted container
    _on_the_previous_driver(n)
    assert "restored the previous" in driver_signal(n).reason


def test_a_host_driver_the_new_one_replaces_comes_back_through_modprobe(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path, host(version="2.18.0", loaded=True))
    shutil.rmtree(n.payload)
    write_payload(n.payload, NEW_VERSION)
    n.fake.fail_module_load("metax", f"could not insert module: {INVALID}", version=NEW_VERSION)
    before = n.fake.module_params("metax")
    manager(n, payload_version=NEW_VERSION).tick()
    assert n.fake.module_version("metax") == "2.18.0"
    assert n.fake.module_params("metax") == before
    assert "restored the previous metax 2.18.0" in driver_signal(n).reason
