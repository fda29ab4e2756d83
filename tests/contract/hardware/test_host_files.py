"""Contract of the node agents' host-file ports (`metax_core.ports.node`), run against the real adapter on a temporary
directory and against the in-memory fake (`metax_hw_fake.agent_files`): the same cases, the same answers.

Aspects covered:
- `SdkStore` (maca): install newest-first and idempotent, a payload without an SDK refused; an interrupted install's
  copy removed and an interrupted removal's hidden version put back; live, gone and unreadable in-use records; a
  version a live container uses is not removed; tidy leaves nothing;
- `ContainerEditHost` (container-edit): hidden and foreign names are not versions; the CDI spec (none, a document,
  garbage); device numbers of device nodes only; the record written reads back as the use;
- `DriverPayload` (driver-manager): the payload's modules flat first with their vermagic (or why not), the copies
  and their host paths, a missing module or firmware image refused, the user space staged and ``current`` pointed
  at the running driver's (or removed);
- `DriverStateStore`, `DriverBaselineStore`, `VfioLoadMarker`: round trips, an unreadable file read as empty, the
  owned paths (the record's own included) and their removal.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from metax_core import versions
from metax_core.errors import HardwareError
from metax_core.node import driver_plan, driver_state, payload_layout, policy, uninstall
from metax_core.ports import node as node_ports
from metax_core.runtime import container_edit, sdk
from metax_hw import driver_files, driver_payload, edit_host, sdk_store, vfio_marker
from metax_hw_fake import agent_files

BACKENDS = ["host", "fake"]


def v(text: str) -> versions.Version:
    return versions.parse(text)


# -- SdkStore -----------------------------------------------------------------------------------------------------


class SdkBackend:
    def __init__(self, kind: str, tmp: pathlib.Path) -> None:
        self.kind = kind
        self.tmp = tmp
        self.fake = agent_files.FakeSdkStore()
        self.real = sdk_store.HostSdkStore(tmp / "maca", tmp / "in-use", tmp / "state")
        self.store: node_ports.SdkStore = self.fake if kind == "fake" else self.real

    def payload(self, version: str, with_sdk: bool = True, name: str = "") -> sdk.Wanted:
        directory = self.tmp / "payload" / (name or version)
        if self.kind == "fake":
            if with_sdk:
                self.fake.payloads.add(str(directory))
        else:
            (directory / (sdk.PAYLOAD_SUBDIR if with_sdk else "other") / "bin").mkdir(parents=True)
            (directory / (sdk.PAYLOAD_SUBDIR if with_sdk else "other") / "bin" / "mxcc").write_text("tool\n")
        return sdk.Wanted(f"maca:{version}", v(version), str(directory))

    def leave(self, name: str) -> None:
        """A directory entry an interrupted round left under the versions' directory."""
        if self.kind == "fake":
            self.fake.names.add(name)
        else:
            (self.real.sdk_dir / name).mkdir(parents=True)

    def record(self, container: str, version: str, alive: bool) -> sdk.Use:
        use = sdk.Use(container, sdk.version_dir(v(version)), f"/run/runc/{container}")
        self.record_text(sdk.use_file_name(container), sdk.render_use(use))
        if alive and self.kind == "fake":
            self.fake.live.add(use.state_dir)
        elif alive:
            (self.real.state_root / "run/runc" / container).mkdir(parents=True)
            (self.real.state_root / "run/runc" / container / "state.json").write_text("{}")
        return use

    def record_text(self, name: str, text: str) -> None:
        if self.kind == "fake":
            self.fake.records[name] = text
        else:
            self.real.in_use_dir.mkdir(parents=True, exist_ok=True)
            (self.real.in_use_dir / name).write_text(text)

    def empty(self) -> bool:
        if self.kind == "fake":
            return not self.fake.names and not self.fake.records
        return not self.real.sdk_dir.exists() and not self.real.in_use_dir.exists()


@pytest.fixture(params=BACKENDS)
def sdks(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> SdkBackend:
    return SdkBackend(request.param, tmp_path)


def test_installs_newest_first_and_again_is_nothing(sdks: SdkBackend) -> None:
    for version in ("2.9.1", "3.0.0"):
        sdks.store.install(sdks.payload(version))
    sdks.store.install(sdks.payload("3.0.0", name="another-image"))  # another image of an installed version
    assert sdks.store.installed() == [v("3.0.0"), v("2.9.1")]


def test_a_payload_without_an_sdk_is_refused(sdks: SdkBackend) -> None:
    with pytest.raises(HardwareError, match="has no maca/ in its /payload"):
        sdks.store.install(sdks.payload("2.9.1", with_sdk=False))
    assert sdks.store.installed() == []


def test_clean_removes_partial_copies_and_puts_hidden_versions_back(sdks: SdkBackend) -> None:
    sdks.store.install(sdks.payload("2.9.1"))
    sdks.store.install(sdks.payload("3.0.0"))
    sdks.store.hide(v("2.9.1"))  # killed right after hiding it
    sdks.leave(sdk.partial_name(v("3.1.0"), "ab12"))  # killed mid-copy
    sdks.leave(sdk.removing_name(v("3.0.0")))  # hidden, and the version is there again: only the copy goes
    assert sdks.store.installed() == [v("3.0.0")]

    done = sdks.store.clean()

    assert sorted(done) == ["removed .3.0.0.removing", "removed .3.1.0.partial-ab12", "restored 2.9.1"]
    assert sdks.store.installed() == [v("3.0.0"), v("2.9.1")]
    assert sdks.store.clean() == []


def test_uses_are_live_gone_or_unreadable(sdks: SdkBackend) -> None:
    running = sdks.record("c1", "2.9.1", alive=True)
    sdks.record("c2", "2.9.1", alive=False)
    sdks.record_text("broken.json", "{not json")
    sdks.record_text(".staging.json.tmp", "ignored")

    live, gone = sdks.store.uses()
    assert live == [running]
    assert gone == ["broken.json", "c2.json"]

    sdks.store.forget(gone)
    assert sdks.store.uses() == ([running], [])


def test_a_version_a_live_container_uses_is_not_removed(sdks: SdkBackend) -> None:
    sdks.store.install(sdks.payload("2.9.1"))
    sdks.store.install(sdks.payload("3.0.0"))
    sdks.record("c1", "2.9.1", alive=True)

    assert sdks.store.remove(v("2.9.1")) is False
    assert sdks.store.remove(v("3.0.0")) is True
    assert sdks.store.installed() == [v("2.9.1")]
    assert sdks.store.clean() == []  # nothing left hidden


def test_tidy_leaves_nothing_once_every_version_went(sdks: SdkBackend) -> None:
    sdks.store.install(sdks.payload("2.9.1"))
    sdks.record("gone", "2.9.1", alive=False)
    _, gone = sdks.store.uses()
    sdks.store.forget(gone)
    assert sdks.store.remove(v("2.9.1")) is True

    sdks.store.tidy()

    assert sdks.store.installed() == []
    assert sdks.store.uses() == ([], [])
    assert sdks.empty()


# -- ContainerEditHost --------------------------------------------------------------------------------------------

SPEC = {"cdiVersion": "0.6.0", "kind": "metax-tech.com/gpu", "devices": []}
SPEC_TEXT = '{"cdiVersion": "0.6.0", "kind": "metax-tech.com/gpu", "devices": []}'


class EditBackend:
    def __init__(self, kind: str, tmp: pathlib.Path) -> None:
        self.kind = kind
        self.tmp = tmp
        self.fake = agent_files.FakeContainerEditHost()
        self.real = edit_host.HostContainerEdit(tmp, tmp / "maca", tmp / "in-use", tmp / "cdi/metax-tech.com-gpu.json")
        self.host: node_ports.ContainerEditHost = self.fake if kind == "fake" else self.real

    def add_version_dir(self, name: str) -> None:
        if self.kind == "fake":
            self.fake.names.add(name)
        else:
            (self.real.sdk_dir / name).mkdir(parents=True)

    def set_spec(self, text: str | None, doc: dict[str, Any] | None) -> None:
        """The spec file's text on the host; the fake holds what a reader makes of it (``doc``)."""
        if self.kind == "fake":
            self.fake.spec = doc
        elif text is not None:
            self.real.cdi_file.parent.mkdir(parents=True, exist_ok=True)
            self.real.cdi_file.write_text(text)

    def add_device(self, path: str) -> None:
        """A character device node at ``path`` (the host's /dev/null, linked in)."""
        st = os.stat("/dev/null")
        if self.kind == "fake":
            self.fake.devices[path] = container_edit.DeviceInfo("c", os.major(st.st_rdev), os.minor(st.st_rdev))
        else:
            (self.tmp / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (self.tmp / path.lstrip("/")).symlink_to("/dev/null")

    def add_plain_file(self, path: str) -> None:
        if self.kind == "host":
            (self.tmp / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (self.tmp / path.lstrip("/")).write_text("not a device")

    def records(self) -> dict[str, sdk.Use]:
        if self.kind == "fake":
            texts = self.fake.records
        else:
            texts = {p.name: p.read_text() for p in self.real.in_use_dir.iterdir()}
        return {name: sdk.parse_use(text) for name, text in texts.items()}


@pytest.fixture(params=BACKENDS)
def edits(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> EditBackend:
    return EditBackend(request.param, tmp_path)


def test_edit_host_lists_versions_not_hidden_or_foreign_names(edits: EditBackend) -> None:
    assert edits.host.installed() == ()
    for name in ("2.9.1", "3.0.0", ".3.1.0.removing", "notes"):
        edits.add_version_dir(name)
    assert edits.host.installed() == (v("3.0.0"), v("2.9.1"))
    assert edits.host.has_version("2.9.1") is True
    assert edits.host.has_version("3.1.0") is False


@pytest.mark.parametrize(
    ("text", "doc"),
    [
        (None, None),
        ("{not json", None),
        ("[1]", None),
        (SPEC_TEXT, SPEC),
    ],
)
def test_edit_host_reads_the_cdi_spec_or_none(edits: EditBackend, text: str | None, doc: dict[str, Any] | None) -> None:
    edits.set_spec(text, doc)
    assert edits.host.cdi_spec() == doc


def test_edit_host_numbers_only_device_nodes(edits: EditBackend) -> None:
    edits.add_device("/dev/mxcd")
    edits.add_plain_file("/dev/dri/card0")
    st = os.stat("/dev/null")

    found = edits.host.device_info(["/dev/mxcd", "/dev/dri/card0", "/dev/absent"])

    assert found == {"/dev/mxcd": container_edit.DeviceInfo("c", os.major(st.st_rdev), os.minor(st.st_rdev))}


def test_edit_host_records_the_use(edits: EditBackend) -> None:
    use = sdk.Use("c1", "2.9.1", "/run/runc/c1")
    edits.host.record_use(use)
    edits.host.record_use(sdk.Use("c1", "3.0.0", "/run/runc/c1"))  # the container's record is replaced whole
    assert edits.records() == {"c1.json": sdk.Use("c1", "3.0.0", "/run/runc/c1")}


# -- DriverPayload ------------------------------------------------------------------------------------------------

RELEASE = "6.1.0-57-amd64"
OTHER = "6.1.0-58-amd64"
BAD = "6.1.0-59-amd64"


def vermagic(path: str) -> payload_layout.Vermagic:
    """modinfo as the contract's fake kernel tooling answers: the release from the path, flat is ``6.1.0-1``."""
    release = pathlib.PurePosixPath(path).parent.name
    if release == BAD:
        raise HardwareError("modinfo", path, "not a module")
    return payload_layout.Vermagic(RELEASE if release == payload_layout.DRIVER_SUBDIR else release, ("SMP",))


class PayloadBackend:
    def __init__(self, kind: str, tmp: pathlib.Path) -> None:
        self.kind = kind
        self.tmp = tmp
        self.payload: node_ports.DriverPayload
        self.made = 0

    def make(
        self, kernels: list[str], user_space: list[str], firmware: dict[policy.FirmwareImage, str]
    ) -> node_ports.DriverPayload:
        if self.kind == "fake":
            self.fake = agent_files.FakeDriverPayload(kernels, user_space, firmware)
            self.payload = self.fake
            return self.payload
        self.made += 1
        source = self.tmp / f"payload-{self.made}"
        for kernel in kernels:
            directory = source / payload_layout.DRIVER_SUBDIR / kernel
            directory.mkdir(parents=True, exist_ok=True)
            (directory / payload_layout.MODULE_FILE).write_bytes(b"ko")
            (directory / "mxgvm.ko").write_bytes(b"ko2")
        for sub in user_space:
            (source / sub).mkdir(parents=True)
            (source / sub / "file").write_text(sub)
        for image, version in firmware.items():
            (source / payload_layout.FIRMWARE_SUBDIR / image.value).mkdir(parents=True)
            (source / payload_layout.FIRMWARE_SUBDIR / image.value / f"mxvbios-{version}.bin").write_bytes(b"fw")
        source.mkdir(exist_ok=True)
        self.payload = driver_payload.HostDriverPayload(source, self.tmp / "host")
        return self.payload

    def on_host(self, path: str) -> bool:
        if self.kind == "fake":
            return path in self.fake.host
        return (self.tmp / "host" / path.lstrip("/")).is_file()

    def current(self) -> str | None:
        if self.kind == "fake":
            return self.fake.current
        link = self.tmp / "host" / payload_layout.HOST_CURRENT.lstrip("/")
        return os.readlink(link) if link.is_symlink() else None


@pytest.fixture(params=BACKENDS)
def payloads(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> PayloadBackend:
    return PayloadBackend(request.param, tmp_path)


def _choice(location: str, release: str = RELEASE) -> payload_layout.ModuleChoice:
    return payload_layout.ModuleChoice(payload_layout.PayloadModule(location, None), release)


def test_payload_modules_flat_first_with_their_vermagic_or_why_not(payloads: PayloadBackend) -> None:
    p = payloads.make([OTHER, payload_layout.FLAT, BAD, RELEASE], [], {})
    found = p.modules(vermagic)
    assert [(m.location, m.vermagic, m.problem) for m in found] == [
        (payload_layout.FLAT, payload_layout.Vermagic(RELEASE, ("SMP",)), None),
        (RELEASE, payload_layout.Vermagic(RELEASE, ("SMP",)), None),
        (OTHER, payload_layout.Vermagic(OTHER, ("SMP",)), None),
        (BAD, None, "not a module"),
    ]
    assert payloads.make([], [], {}).modules(vermagic) == []


def test_payload_driver_copies_once_to_its_version_and_kernel(payloads: PayloadBackend) -> None:
    p = payloads.make([RELEASE, payload_layout.FLAT], [], {})
    path = p.install_driver("2.18.0", _choice(RELEASE))
    assert path == f"/var/lib/metax/drivers/2.18.0/{RELEASE}/metax.ko"
    assert payloads.on_host(path)
    assert p.install_driver("2.18.0", _choice(RELEASE)) == path
    flat = p.install_driver("2.18.1", _choice(payload_layout.FLAT, OTHER))
    assert flat == f"/var/lib/metax/drivers/2.18.1/{OTHER}/metax.ko"
    assert payloads.on_host(flat)
    with pytest.raises(HardwareError, match="the payload has no metax.ko"):
        p.install_driver("2.18.0", _choice(OTHER, OTHER))


def test_payload_user_space_staged_and_current_follows_the_running_driver(payloads: PayloadBackend) -> None:
    p = payloads.make([RELEASE], [payload_layout.TOOLS_SUBDIR, payload_layout.LIBRARY_SUBDIR], {})
    assert p.install_user_space("2.18.0") is True
    assert p.point_current("2.18.0") == "2.18.0"
    assert payloads.current() == "2.18.0"
    assert p.point_current("2.18.0") == "2.18.0"
    assert p.point_current("2.19.0") is None  # a version that brought none: no tools of another version
    assert payloads.current() is None
    assert payloads.make([RELEASE], [], {}).install_user_space("2.19.0") is False


def test_payload_firmware_version_and_copy(payloads: PayloadBackend) -> None:
    p = payloads.make([], [], {policy.FirmwareImage.NON_VIRT: "1.14.0.0"})
    assert p.vbios(enable_virt=False) == "1.14.0.0"
    assert p.vbios(enable_virt=True) is None
    path = p.install_firmware(policy.FirmwareImage.NON_VIRT)
    assert path == f"{driver_plan.HOST_FIRMWARE_DIR}/1.14.0.0/non-virt/mxvbios-1.14.0.0.bin"
    assert payloads.on_host(path)
    with pytest.raises(HardwareError, match="the payload has no virt image"):
        p.install_firmware(policy.FirmwareImage.VIRT)


# -- driver-manager's records and vfio-manager's marker -------------------------------------------------------------


def _state_store(kind: str, tmp: pathlib.Path) -> tuple[node_ports.DriverStateStore, Callable[[str], None]]:
    if kind == "fake":
        fake = agent_files.FakeDriverStateStore()
        return fake, lambda text: setattr(fake, "text", text)
    real = driver_files.StateFile(tmp)

    def put(text: str) -> None:
        real.path.parent.mkdir(parents=True, exist_ok=True)
        real.path.write_text(text)

    return real, put


@pytest.mark.parametrize("kind", BACKENDS)
def test_driver_state_round_trips_and_unreadable_reads_as_empty(kind: str, tmp_path: pathlib.Path) -> None:
    store, put = _state_store(kind, tmp_path)
    assert store.read() == driver_state.HostState()
    state = driver_state.HostState(
        {"a": "1"},
        {"0000:03:00.0": "1.14.0.0"},
        "2.18.0",
        "/var/lib/metax/drivers/2.18.0/k/metax.ko",
        driver_plan.RunningDriver("2.17.0", {"b": "2"}, None, {"0000:03:00.0": 4}),
    )
    store.write(state)
    assert store.read() == state
    put("{garbage")
    assert store.read() == driver_state.HostState()
    put('["a list"]')
    assert store.read() == driver_state.HostState()


def _baseline_store(kind: str, tmp: pathlib.Path) -> tuple[node_ports.DriverBaselineStore, Callable[[str], None]]:
    if kind == "fake":
        fake = agent_files.FakeDriverBaselineStore()
        return fake, fake.add
    real = driver_files.BaselineFile(tmp)

    def add(rel: str) -> None:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text("x")

    return real, add


@pytest.mark.parametrize("kind", BACKENDS)
def test_driver_baseline_records_owned_paths_and_removes_them(kind: str, tmp_path: pathlib.Path) -> None:
    store, add = _baseline_store(kind, tmp_path)
    assert store.exists() is False
    assert store.read() is None
    assert store.owned_paths() == []
    add("lib/firmware/metax/host.bin")
    add("etc/not-ours.conf")

    baseline = uninstall.Baseline(True, "2.17.0", {"a": "1"}, {}, tuple(store.owned_paths()))
    store.write(baseline)

    assert store.exists() is True
    assert store.read() == baseline
    assert sorted(store.owned_paths()) == [
        "lib/firmware/metax",
        "lib/firmware/metax/host.bin",
        "var/lib/metax/driver-manager",
        "var/lib/metax/driver-manager/baseline.json",
    ]
    add("var/lib/metax/drivers/2.18.0/k/metax.ko")
    assert store.remove(["var/lib/metax/drivers", "var/lib/metax/driver-manager", "var/lib/metax/absent"]) == []
    assert sorted(store.owned_paths()) == ["lib/firmware/metax", "lib/firmware/metax/host.bin"]
    assert store.exists() is False


@pytest.mark.parametrize("kind", BACKENDS)
def test_vfio_marker_is_idempotent(kind: str, tmp_path: pathlib.Path) -> None:
    marker: node_ports.VfioLoadMarker = (
        agent_files.FakeVfioLoadMarker() if kind == "fake" else vfio_marker.HostVfioMarker(tmp_path)
    )
    assert marker.present() is False
    marker.mark()
    marker.mark()
    assert marker.present() is True
    marker.clear()
    marker.clear()
    assert marker.present() is False
    if kind == "host":
        assert not (tmp_path / vfio_marker.STATE_DIR.lstrip("/")).exists()  # its directory goes with it
