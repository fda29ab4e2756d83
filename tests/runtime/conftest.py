"""Fixtures for the runtime wrapper with the REAL runc (built by the harness, ~/.cache/metax-operator) and the
real container-edit service on a unix socket: a host directory where the real maca agent installed fake SDK
payloads, and busybox bundles to run.

* ``runc`` (session): the harness's runc (`metax_dev.controlplane.build`, cached; a cold build takes minutes,
  done after collection).
* ``wrapper`` (session): ``metax-container-runtime`` compiled with ``gcc -static`` (`metax_dev.wrapper`).
* ``node`` (function): a `RuntimeHost` — the maca agent's host root with MXMACA 2.18.0.3 and 2.9.1 installed
  by the agent from fake payload images, the edit service listening, a runc root, and helpers to make a
  bundle and run the wrapper.

Needs root (runc creates namespaces); a missing tool fails the tests with the reason, never a skip.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator

import attrs
import pytest

from metax_dev import fake_sdk, wrapper
from metax_dev.controlplane import build, errors
from metax_dev.realnode import images
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_edit import config as edit_config
from services.container_edit import server
from services.maca import agent, bootstrap
from services.maca import config as maca_config

NODE = "runtime-node"
VERSIONS = ("2.18.0.3", "2.9.1")
APPLETS = ("sh", "cat", "ls", "env", "touch", "echo", "sleep", "test")

_build: build.BuildResult | errors.ControlPlaneError | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _build
    if session.config.option.collectonly or not any("runc" in getattr(i, "fixturenames", ()) for i in session.items):
        return
    try:
        _build = build.build(quiet=True)
    except errors.ControlPlaneError as exc:
        _build = exc


@pytest.fixture(scope="session")
def runc() -> pathlib.Path:
    if not isinstance(_build, build.BuildResult):
        pytest.fail(f"the harness's runc is unavailable: {_build}", pytrace=False)
    return _build.binary("runc")


@pytest.fixture(scope="session")
def wrapper_binary() -> pathlib.Path:
    try:
        return wrapper.build()
    except wrapper.WrapperBuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@attrs.define
class RuntimeHost:
    tmp: pathlib.Path
    runc: pathlib.Path
    wrapper: pathlib.Path
    maca: agent.Maca
    editor: server.Editor
    socket: pathlib.Path
    runc_root: pathlib.Path
    stop: threading.Event
    thread: threading.Thread | None = None

    @property
    def sdk_dir(self) -> pathlib.Path:
        return self.maca.store.sdk_dir

    def start_service(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=server.serve, args=(self.editor.settings, self.stop, self.editor), daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            assert time.monotonic() < deadline, "the edit service did not start listening"
            time.sleep(0.01)

    def stop_service(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
        self.thread = None

    def bundle(
        self, name: str, args: list[str], env: list[str], annotations: dict[str, str] | None = None
    ) -> pathlib.Path:
        bundle = self.tmp / "bundles" / name
        rootfs = bundle / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(images.BUSYBOX, rootfs / "bin" / "busybox")
        for applet in APPLETS:
            (rootfs / "bin" / applet).symlink_to("busybox")
        subprocess.run([str(self.runc), "spec", "--bundle", str(bundle)], check=True, capture_output=True)
        spec = json.loads((bundle / "config.json").read_text())
        spec["process"].update(terminal=False, args=args, env=["PATH=/bin:/usr/bin", *env])
        spec["root"]["readonly"] = True
        if annotations:
            spec["annotations"] = annotations
        (bundle / "config.json").write_text(json.dumps(spec, indent=1))
        return bundle

    def run(
        self, bundle: pathlib.Path, container: str, *, command: str = "run", binary: pathlib.Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The wrapper (or ``binary``, a copy of it with its own .conf: then no variables) in front of runc."""
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        if binary is None:
            env |= {"METAX_RUNC": str(self.runc), "METAX_EDIT_SOCKET": str(self.socket)}
        argv = [str(binary or self.wrapper), "--root", str(self.runc_root), command, "--bundle", str(bundle), container]
        if command == "create":  # the container's init keeps its stdio: files, not pipes we would wait on
            out = self.tmp / f"{container}.out"
            with out.open("w") as f:
                done = subprocess.run(
                    argv, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=f, text=True, timeout=60, check=False
                )
            return subprocess.CompletedProcess(argv, done.returncode, out.read_text(), out.read_text())
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)

    def runc_cmd(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.runc), "--root", str(self.runc_root), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def maca_with(self, *wanted: str) -> agent.Maca:
        """A maca agent (same host) whose payload lists ``wanted`` (already unpacked by `node`)."""
        s = attrs.evolve(self.maca.settings, payload_images=tuple(fake_sdk.reference(v) for v in wanted))
        return bootstrap.bootstrap(s, ports=self.maca.ports, board=None)


@pytest.fixture
def node(tmp_path: pathlib.Path, runc: pathlib.Path, wrapper_binary: pathlib.Path) -> Iterator[RuntimeHost]:
    host_root = tmp_path / "host"
    payload = tmp_path / "payload"
    refs = []
    for i, version in enumerate(VERSIONS):
        fake_sdk.unpack_payload(fake_sdk.write_payload_image(tmp_path / "images", version), payload / str(i))
        refs.append(fake_sdk.reference(version))
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(NODE)
    settings = maca_config.Settings(
        node_name=NODE,
        host_root=host_root,
        payload_dir=payload,
        payload_images=tuple(refs),  # type: ignore[arg-type]
        container_state_root=pathlib.Path("/"),  # runc's state dirs are real paths on this machine
    )
    maca = bootstrap.bootstrap(settings, ports=cluster.in_memory(k8s, "maca", NODE), board=None)
    maca.tick()
    socket = tmp_path / "edit.sock"
    edit_settings = edit_config.Settings(
        host_root=pathlib.Path("/"),
        socket=str(socket),  # type: ignore[arg-type]
        sdk_dir=str(maca.store.sdk_dir),  # type: ignore[arg-type]
        in_use_dir=str(maca.store.in_use_dir),  # type: ignore[arg-type]
        cdi_dir=str(tmp_path / "cdi"),  # type: ignore[arg-type]
    )
    host = RuntimeHost(
        tmp_path,
        runc,
        wrapper_binary,
        maca,
        server.Editor(edit_settings),
        socket,
        tmp_path / "runc-root",
        threading.Event(),
    )
    host.start_service()
    try:
        yield host
    finally:
        host.stop_service()
        listed = host.runc_cmd("list", "-q").stdout.split()
        for container in listed:
            host.runc_cmd("delete", "--force", container)
