"""In-memory stand-ins for the host files node agents keep (`metax_core.ports.node`'s host-file ports).

Why in memory, not under a fake root: these ports hold records, not kernel behaviour, so a dictionary tells the
same story faster and the tests can look at it directly (``names``, ``records``, ``files``). Each fake follows
the real adapter (`metax_hw.sdk_store`, `edit_host`, `driver_payload`, `driver_files`, `vfio_marker`) in every
outcome the ports promise; `tests/contract/hardware/test_host_files.py` runs the same cases against both, so a
behaviour one has and the other lacks fails there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metax_core import versions
from metax_core.errors import HardwareError, InvalidSpec
from metax_core.node import driver_state, payload_layout, policy, uninstall
from metax_core.node.driver_plan import HOST_FIRMWARE_DIR
from metax_core.runtime import container_edit, sdk


class FakeSdkStore:
    """`SdkStore` over a set of directory names (``names``: what the versions' directory lists)."""

    def __init__(self, payloads: Sequence[str] = (), live: Sequence[str] = ()) -> None:
        self.names: set[str] = set()
        self.records: dict[str, str] = {}
        """Record file name → its text (what the edit service wrote)."""
        self.payloads = set(payloads)
        """Payload directories that bring an SDK (``<payload>/maca/``)."""
        self.live = set(live)
        """runc state directories of running containers."""
        self.tidied = False

    def installed(self) -> list[versions.Version]:
        return sdk.installed(self.names)

    def clean(self) -> list[str]:
        done = []
        for name in sdk.leftovers(self.names):
            self.names.discard(name)
            if name.endswith(sdk.REMOVING):
                back = name[1 : -len(sdk.REMOVING)]
                if back not in self.names:
                    self.names.add(back)
                    done.append(f"restored {back}")
                    continue
            done.append(f"removed {name}")
        return done

    def install(self, want: sdk.Wanted) -> None:
        if want.payload not in self.payloads:
            raise HardwareError(
                "install MXMACA", str(want.version), f"{want.image} has no {sdk.PAYLOAD_SUBDIR}/ in its /payload"
            )
        self.names.add(sdk.version_dir(want.version))
        self.tidied = False

    def hide(self, version: versions.Version) -> None:
        self._rename(sdk.version_dir(version), sdk.removing_name(version))

    def unhide(self, version: versions.Version) -> None:
        self._rename(sdk.removing_name(version), sdk.version_dir(version))

    def _rename(self, old: str, new: str) -> None:
        if old not in self.names:
            raise FileNotFoundError(old)  # as the rename of a missing directory does
        self.names.remove(old)
        self.names.add(new)

    def uses(self) -> tuple[list[sdk.Use], list[str]]:
        live: list[sdk.Use] = []
        gone: list[str] = []
        for name in sorted(n for n in self.records if n.endswith(".json") and not n.startswith(".")):
            try:
                use = sdk.parse_use(self.records[name])
            except InvalidSpec:
                gone.append(name)
                continue
            if use.state_dir in self.live:
                live.append(use)
            else:
                gone.append(name)
        return live, gone

    def forget(self, names: Sequence[str]) -> None:
        for name in names:
            self.records.pop(name, None)

    def remove(self, version: versions.Version) -> bool:
        self.hide(version)
        live, _ = self.uses()
        if any(u.version == sdk.version_dir(version) for u in live):
            self.unhide(version)
            return False
        self.names.discard(sdk.removing_name(version))
        return True

    def tidy(self) -> None:
        self.records.clear()
        self.tidied = True


class FakeContainerEditHost:
    """`ContainerEditHost` over ``versions`` (installed directory names), a CDI spec and device nodes."""

    def __init__(
        self,
        installed: Sequence[str] = (),
        spec: Mapping[str, Any] | None = None,
        devices: Mapping[str, container_edit.DeviceInfo] | None = None,
    ) -> None:
        self.names = set(installed)
        self.spec = spec
        self.devices = dict(devices or {})
        self.records: dict[str, str] = {}

    def installed(self) -> tuple[versions.Version, ...]:
        return tuple(sdk.installed(self.names))

    def cdi_spec(self) -> Mapping[str, Any] | None:
        return self.spec

    def device_info(self, paths: Sequence[str]) -> dict[str, container_edit.DeviceInfo]:
        return {p: self.devices[p] for p in paths if p in self.devices}

    def record_use(self, use: sdk.Use) -> None:
        self.records[sdk.use_file_name(use.container_id)] = sdk.render_use(use)

    def has_version(self, name: str) -> bool:
        return name in self.names


class FakeDriverPayload:
    """`DriverPayload`: what the payload brings (``kernels``: locations of a ``metax.ko``, `payload_layout.FLAT` or a
    kernel release; ``user_space``; ``firmware`` image → VBIOS version) and what its copies made on the host
    (``host``: host-absolute paths; ``current``: the link's target)."""

    def __init__(
        self,
        kernels: Sequence[str] = (),
        user_space: Sequence[str] = (),
        firmware: Mapping[policy.FirmwareImage, str] | None = None,
        payload_dir: str = "/payload",
    ) -> None:
        self.kernels = set(kernels)
        self.user_space = set(user_space)
        self.firmware = dict(firmware or {})
        self.payload_dir = payload_dir
        self.host: set[str] = set()
        self.current: str | None = None

    def modules(self, vermagic: Callable[[str], payload_layout.Vermagic]) -> list[payload_layout.PayloadModule]:
        flat = [payload_layout.FLAT] if payload_layout.FLAT in self.kernels else []
        found = []
        for location in flat + sorted(k for k in self.kernels if k != payload_layout.FLAT):
            relpath = payload_layout.PayloadModule(location, None).relpath
            try:
                found.append(payload_layout.PayloadModule(location, vermagic(f"{self.payload_dir}/{relpath}")))
            except HardwareError as exc:
                found.append(payload_layout.PayloadModule(location, None, exc.detail))
        return found

    def install_driver(self, version: str, choice: payload_layout.ModuleChoice) -> str:
        path = payload_layout.host_module_path(version, choice.release)
        if path in self.host:
            return path
        if choice.module.location not in self.kernels:
            raise HardwareError(
                "install payload driver", version, f"the payload has no {payload_layout.MODULE_FILE} for {choice}"
            )
        self.host.add(path)
        return path

    def install_user_space(self, version: str) -> bool:
        for sub in self.user_space:
            self.host.add(f"{payload_layout.host_version_dir(version)}/{sub}")
        return bool(self.user_space)

    def point_current(self, running_version: str | None) -> str | None:
        base = payload_layout.HOST_DRIVER_DIR + "/"
        staged = {p[len(base) :].split("/")[0] for p in self.host if p.startswith(base) and _user_space(p)}
        self.current = payload_layout.current_link(running_version, sorted(staged))
        return self.current

    def vbios(self, enable_virt: bool) -> str | None:
        return self.firmware.get(policy.FirmwareImage.VIRT if enable_virt else policy.FirmwareImage.NON_VIRT)

    def install_firmware(self, image: policy.FirmwareImage) -> str:
        version = self.firmware.get(image)
        if version is None:
            raise HardwareError("install payload firmware", image.value, f"the payload has no {image.value} image")
        path = f"{HOST_FIRMWARE_DIR}/{version}/{image.value}/mxvbios-{version}.bin"
        self.host.add(path)
        return path


def _user_space(path: str) -> bool:
    return path.rsplit("/", 1)[-1] in payload_layout.USER_SPACE


class FakeDriverStateStore:
    """`DriverStateStore` keeping the file's text (``text``, None: no file), so a read is a fresh copy."""

    def __init__(self, text: str | None = None) -> None:
        self.text = text

    def read(self) -> driver_state.HostState:
        if self.text is None:
            return driver_state.HostState()
        try:
            return driver_state.parse(self.text)
        except ValueError:
            return driver_state.HostState()

    def write(self, state: driver_state.HostState) -> None:
        self.text = driver_state.render(state)


class FakeDriverBaselineStore:
    """`DriverBaselineStore` over a set of host-root-relative paths (``paths``, directories included, as
    `add` puts them) holding the record itself at `BASELINE` like the real file."""

    BASELINE = "var/lib/metax/driver-manager/baseline.json"

    def __init__(self, files: Sequence[str] = (), undeletable: Sequence[str] = ()) -> None:
        self.paths: set[str] = set()
        self.texts: dict[str, str] = {}
        for rel in files:
            self.add(rel)
        self.undeletable = set(undeletable)
        """Paths whose removal fails (as a busy or read-only file's does)."""

    def add(self, rel: str, text: str = "") -> None:
        """A file at ``rel`` with its directories (those under one of `uninstall.OWNED_DIRS` and the top itself)."""
        parts = rel.split("/")
        for n in range(1, len(parts) + 1):
            prefix = "/".join(parts[:n])
            if any(prefix == top or prefix.startswith(top + "/") for top in uninstall.OWNED_DIRS):
                self.paths.add(prefix)
        self.texts[rel] = text

    def exists(self) -> bool:
        return self.BASELINE in self.paths

    def read(self) -> uninstall.Baseline | None:
        if not self.exists():
            return None
        try:
            return uninstall.parse_baseline(self.texts.get(self.BASELINE, ""))
        except InvalidSpec:
            return None

    def write(self, baseline: uninstall.Baseline) -> None:
        self.add(self.BASELINE, uninstall.render_baseline(baseline))

    def owned_paths(self) -> list[str]:
        return sorted(self.paths)

    def remove(self, paths: Sequence[str]) -> list[str]:
        kept = []
        for rel in paths:
            inside = {p for p in self.paths if p == rel or p.startswith(rel + "/")}
            if inside & self.undeletable:
                kept.append(f"/{rel}: cannot remove")
                continue
            self.paths -= inside
            for p in inside:
                self.texts.pop(p, None)
        return kept


class FakeVfioLoadMarker:
    def __init__(self, marked: bool = False) -> None:
        self.marked = marked

    def present(self) -> bool:
        return self.marked

    def mark(self) -> None:
        self.marked = True

    def clear(self) -> None:
        self.marked = False
