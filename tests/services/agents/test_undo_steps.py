"""The agents' undo steps over in-memory host files (`metax_hw_fake.agent_files`), the shell only calling ports:

- maca's undo removes every version no live container uses, forgets the gone containers' records, and tidies
  only when nothing stays; a version a live container uses stays, and the answer names the container;
- driver-manager's undo removes what it added under its directories (what was there before stays), the state
  and the record last, and keeps the record when a removal fails so the next try starts from it;
- vfio-manager's undo clears its marker when it loaded nothing else that stays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from metax_core import versions
from metax_core.inventory import ModuleState, PciAddress, PciFunction
from metax_core.node import uninstall
from metax_core.runtime import sdk
from metax_hw_fake import agent_files
from services.driver_manager import undo as driver_undo
from services.maca import undo as maca_undo
from services.vfio_manager import undo as vfio_undo


def _sdks(*installed: str) -> agent_files.FakeSdkStore:
    store = agent_files.FakeSdkStore(payloads=["/p"])
    for version in installed:
        store.install(sdk.Wanted("img", versions.parse(version), "/p"))
    return store


def _use(store: agent_files.FakeSdkStore, container: str, version: str, alive: bool) -> None:
    use = sdk.Use(container, version, f"/run/runc/{container}")
    store.records[sdk.use_file_name(container)] = sdk.render_use(use)
    if alive:
        store.live.add(use.state_dir)


def test_maca_undo_removes_unused_versions_and_tidies() -> None:
    store = _sdks("2.9.1", "3.0.0")
    _use(store, "gone", "2.9.1", alive=False)

    assert maca_undo.undo(store) == []
    assert store.names == set()
    assert store.records == {}
    assert store.tidied is True


def test_maca_undo_keeps_a_version_a_live_container_uses() -> None:
    store = _sdks("2.9.1", "3.0.0")
    _use(store, "c1", "2.9.1", alive=True)

    assert maca_undo.undo(store) == ["MXMACA 2.9.1: used by container(s) c1"]
    assert store.installed() == [versions.parse("2.9.1")]
    assert list(store.records) == ["c1.json"]
    assert store.tidied is False


class _Host:
    """No metax module loaded, no GPU: the undo's module plan has nothing to do."""

    def state(self, name: str) -> ModuleState | None:
        return None

    def functions(self) -> Sequence[PciFunction]:
        return []

    def unload(self, name: str) -> None:
        raise AssertionError("nothing to unload")

    def load(self, name: str, params: Mapping[str, str]) -> None:
        raise AssertionError("nothing to load")

    def set_vf_count(self, pf: PciAddress, count: int, drivers_autoprobe: bool | None = None) -> None:
        raise AssertionError("no VFs")

    def reset_driver(self, address: PciAddress) -> str | None:
        raise AssertionError("no GPU")


def test_driver_undo_removes_what_it_added_and_the_record_last() -> None:
    host = _Host()
    files = agent_files.FakeDriverBaselineStore(["lib/firmware/metax/host.bin"])
    driver_undo.record_first_touch(files, host, host)  # type: ignore[arg-type]
    files.add("var/lib/metax/drivers/2.18.0/k/metax.ko")
    files.add("lib/firmware/metax/1.14.0.0/non-virt/mxvbios-1.14.0.0.bin")
    files.add("var/lib/metax/driver-manager/state.json")

    assert driver_undo.undo(files, host, host, host) == []  # type: ignore[arg-type]
    assert files.owned_paths() == ["lib/firmware/metax", "lib/firmware/metax/host.bin"]
    assert files.exists() is False


def test_driver_undo_keeps_the_record_when_a_removal_fails() -> None:
    host = _Host()
    files = agent_files.FakeDriverBaselineStore(undeletable=["var/lib/metax/drivers/2.18.0/k/metax.ko"])
    driver_undo.record_first_touch(files, host, host)  # type: ignore[arg-type]
    files.add("var/lib/metax/drivers/2.18.0/k/metax.ko")

    kept = driver_undo.undo(files, host, host, host)  # type: ignore[arg-type]
    assert "/var/lib/metax/drivers/2.18.0/k/metax.ko: cannot remove" in kept
    assert files.exists() is True
    assert files.read() == uninstall.Baseline(False)


def test_vfio_undo_clears_the_marker() -> None:
    host = _Host()
    marker = agent_files.FakeVfioLoadMarker(marked=True)
    assert vfio_undo.undo(marker, host, host, host) == []  # type: ignore[arg-type]
    assert marker.present() is False
