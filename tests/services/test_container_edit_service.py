"""The container-edit service over a real unix socket (services/container_edit/server.py).

Aspects: a request that is not ours gets a refusal saying why (never a dropped connection or a crash); a
non-MetaX config is ``unchanged``; a MetaX one with a version request is ``edited`` and its in-use record is
written before the answer, readable by the maca agent's store (one format, `metax_core.runtime.sdk`); a version
that disappears between the resolve and the check (the GC's removal protocol) is resolved again and then
refused; the probe file exists while it listens; the socket and the probe file are removed when it stops.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import stat
import threading
import time
from collections.abc import Iterator

import pytest

from metax_core.runtime import edit_wire
from metax_hw import sdk_store
from metax_hw_fake import agent_files
from services.container_edit import config, server

GPU_CONFIG = json.dumps(
    {"process": {"env": ["PATH=/bin", "METAX_VISIBLE_DEVICES=0000:09:00.0", "METAX_MACA_VERSION=maca-2"]}}
).encode()


def settings(tmp: pathlib.Path) -> config.Settings:
    return config.Settings(
        host_root=pathlib.Path("/"),
        socket=str(tmp / "e.sock"),  # type: ignore[arg-type]
        sdk_dir=str(tmp / "maca"),  # type: ignore[arg-type]
        in_use_dir=str(tmp / "in-use"),  # type: ignore[arg-type]
        cdi_dir=str(tmp / "cdi"),  # type: ignore[arg-type]
        probe_file=str(tmp / "ready"),
    )


@pytest.fixture
def running(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    (tmp_path / "maca" / "2.18.0.3").mkdir(parents=True)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, args=(settings(tmp_path), stop), daemon=True)
    thread.start()
    while not (tmp_path / "ready").exists():  # the probe file: written once it listens
        time.sleep(0.01)
    assert (tmp_path / "e.sock").exists()
    yield tmp_path
    stop.set()
    thread.join(10)
    assert not (tmp_path / "e.sock").exists() and not (tmp_path / "ready").exists()


def ask(path: pathlib.Path, data: bytes) -> edit_wire.Response:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(path))
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return edit_wire.parse_response(answer)


def test_a_foreign_request_is_refused_with_why(running: pathlib.Path) -> None:
    got = ask(running / "e.sock", b"GET / HTTP/1.1\n\n")
    assert got.status is edit_wire.Status.REFUSED and "must start with 'metax-edit/1'" in got.message


def test_unchanged_and_edited_with_the_record_first(running: pathlib.Path) -> None:
    plain = edit_wire.Request("c0", "/b", None, b'{"process": {"env": ["PATH=/bin"]}}')
    assert ask(running / "e.sock", edit_wire.render_request(plain)).status is edit_wire.Status.UNCHANGED
    request = edit_wire.Request("c1", "/b", "/run/containerd/runc/k8s.io", GPU_CONFIG)
    got = ask(running / "e.sock", edit_wire.render_request(request))
    assert got.status is edit_wire.Status.EDITED
    assert json.loads(got.body)["mounts"][0]["source"] == str(running / "maca" / "2.18.0.3")
    (running / "state/run/containerd/runc/k8s.io/c1").mkdir(parents=True)
    (running / "state/run/containerd/runc/k8s.io/c1/state.json").write_text("{}")
    live, gone = sdk_store.HostSdkStore(running / "maca", running / "in-use", running / "state").uses()
    assert [(u.container_id, u.version) for u in live] == [("c1", "2.18.0.3")] and gone == []


def test_bad_json_is_refused(running: pathlib.Path) -> None:
    got = ask(running / "e.sock", edit_wire.render_request(edit_wire.Request("c2", "/b", None, b"{nope")))
    assert got.status is edit_wire.Status.REFUSED and "config.json of container c2 is not JSON" in got.message


class _Vanishing(agent_files.FakeContainerEditHost):
    """The version is listed, but its directory is gone by the check (the GC hid it in between)."""

    def has_version(self, name: str) -> bool:
        return False


def test_a_version_removed_during_the_start_is_refused(tmp_path: pathlib.Path) -> None:
    host = _Vanishing(installed=["2.20.0"])
    editor = server.Editor(settings(tmp_path), host)
    got = editor.answer(edit_wire.Request("c3", "/b", None, GPU_CONFIG))
    assert got.status is edit_wire.Status.REFUSED
    assert "removed while the container started" in got.message
    assert list(host.records) == ["c3.json"]  # the record came first, as the removal protocol needs


def test_the_socket_is_root_only_even_under_a_permissive_umask(tmp_path: pathlib.Path) -> None:
    """The socket appears at its path already 0600 (bound under a staging name, then renamed), whatever the umask."""
    old = os.umask(0)
    try:
        started = server.Server(tmp_path / "e.sock", server.Editor(settings(tmp_path)))
        try:
            assert stat.S_IMODE((tmp_path / "e.sock").stat().st_mode) == 0o600
            assert stat.S_ISSOCK((tmp_path / "e.sock").stat().st_mode)
            assert sorted(p.name for p in tmp_path.iterdir()) == ["e.sock"]  # no staging name left
        finally:
            started.close()
    finally:
        os.umask(old)


def test_starting_the_service_leaves_other_threads_files_alone(tmp_path: pathlib.Path) -> None:
    """The race CI once hit: the service set the process-wide umask to 0177 while it bound, and a directory another
    thread made meanwhile (a runc bundle there; the maca agent's SDK unpacking in the product) came out 0600, which
    a container without CAP_DAC_OVERRIDE cannot search."""
    made = tmp_path / "made"
    made.mkdir()
    stop = threading.Event()

    def make_directories() -> None:
        i = 0
        while not stop.is_set():
            (made / str(i)).mkdir()
            i += 1

    maker = threading.Thread(target=make_directories)
    maker.start()
    try:
        for _ in range(200):
            server.Server(tmp_path / "e.sock", server.Editor(settings(tmp_path))).close()
    finally:
        stop.set()
        maker.join()
    modes = {oct(stat.S_IMODE(d.stat().st_mode)) for d in made.iterdir()}
    assert modes == {oct(0o777 & ~_umask())}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
