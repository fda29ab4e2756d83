"""Contract of `metax_core.ports.node.RuntimeFiles` (container-runtime's host files): the real adapter on a temporary
host root and the in-memory fake (`metax_hw_fake.runtime_files`) give the same answers.

Aspects covered:
- read, write and stat: no file reads as None; a new file is 0644 and the process's; a given mode is kept; a
  rewrite keeps the file's mode;
- put: None removes, the same text writes nothing (the change stamp stays), another text changes the stamp;
- glob as Go's ``filepath.Glob`` finds containerd's imports: sorted, hidden names included, ``*`` within one
  component, a literal path only when it exists;
- the directories a write creates, and an empty one removed (a non-empty one kept);
- a scratch copy is private and cleaned with the write's temporaries, also those staged outside a directory;
- the wrapper: copied once, executable, a missing source refused; a killed copy's leftovers removed.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from metax_core.errors import HardwareError
from metax_core.ports import node as node_ports
from metax_core.runtime import record
from metax_hw import runtime_files
from metax_hw_fake import runtime_files as fake_runtime_files

WRAPPER = b'#!/bin/sh\nexec runc "$@"\n'


class Backend:
    def __init__(self, kind: str, tmp: pathlib.Path) -> None:
        self.kind = kind
        self.root = tmp / "host"
        self.root.mkdir()
        self.source = str(tmp / "image-wrapper")
        pathlib.Path(self.source).write_bytes(WRAPPER)
        self.fake = fake_runtime_files.FakeRuntimeFiles(sources={self.source: WRAPPER})
        self.files: node_ports.RuntimeFiles = self.fake if kind == "fake" else runtime_files.HostFiles(self.root)

    def leave(self, path: str, data: bytes) -> None:
        """A file a killed step left (written behind the port's back)."""
        if self.kind == "fake":
            self.fake._put_file(path, data, record.FileMode(0o600, os.getuid(), os.getgid()))
        else:
            target = self.root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def listing(self, directory: str) -> list[str]:
        if self.kind == "fake":
            return self.fake._children(directory)
        return sorted(p.name for p in (self.root / directory.lstrip("/")).iterdir())


@pytest.fixture(params=["host", "fake"])
def host(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Backend:
    return Backend(request.param, tmp_path)


def test_write_read_and_modes(host: Backend) -> None:
    f = host.files
    assert f.read("/etc/containerd/config.toml") is None
    assert f.stat("/etc/containerd/config.toml") is None

    f.write("/etc/containerd/config.toml", "version = 2\n")
    assert f.read("/etc/containerd/config.toml") == "version = 2\n"
    assert f.stat("/etc/containerd/config.toml") == record.FileMode(0o644, os.getuid(), os.getgid())

    f.write("/etc/containerd/config.toml", "version = 3\n", record.FileMode(0o600, os.getuid(), os.getgid()))
    f.write("/etc/containerd/config.toml", "version = 3\n# ours\n")  # a rewrite keeps the mode
    assert f.stat("/etc/containerd/config.toml") == record.FileMode(0o600, os.getuid(), os.getgid())
    assert f.read("/etc/containerd/config.toml") == "version = 3\n# ours\n"


def test_put_writes_only_a_change(host: Backend) -> None:
    f = host.files
    f.put("/etc/docker/daemon.json", "{}\n")
    first = f.stamp("/etc/docker/daemon.json")
    assert first is not None
    f.put("/etc/docker/daemon.json", "{}\n")
    assert f.stamp("/etc/docker/daemon.json") == first
    f.put("/etc/docker/daemon.json", '{"runtimes": {}}\n')
    assert f.stamp("/etc/docker/daemon.json") != first
    f.put("/etc/docker/daemon.json", None)
    assert f.read("/etc/docker/daemon.json") is None
    assert f.stamp("/etc/docker/daemon.json") is None
    f.put("/etc/docker/daemon.json", None)  # nothing to remove: no error


def test_glob_is_go_filepath_glob(host: Backend) -> None:
    f = host.files
    for name in ("b.toml", "a.toml", ".hidden.toml", "notes.txt"):
        f.write(f"/etc/containerd/conf.d/{name}", "x")
    f.write("/etc/containerd/conf.d/sub/c.toml", "x")

    assert f.glob("/etc/containerd/conf.d/*.toml") == (
        "/etc/containerd/conf.d/.hidden.toml",
        "/etc/containerd/conf.d/a.toml",
        "/etc/containerd/conf.d/b.toml",
    )
    assert f.glob("/etc/containerd/*/*.toml") == f.glob("/etc/containerd/conf.d/*.toml")
    assert f.glob("/etc/containerd/conf.d/a.toml") == ("/etc/containerd/conf.d/a.toml",)
    assert f.glob("/etc/containerd/conf.d/z.toml") == ()
    assert f.glob("/etc/crio/*.conf") == ()


def test_directories_a_write_creates_and_removing_an_empty_one(host: Backend) -> None:
    f = host.files
    assert f.missing_dirs("/etc/crio/crio.conf.d/99-metax.conf") == ("/etc", "/etc/crio", "/etc/crio/crio.conf.d")
    f.write("/etc/crio/crio.conf.d/99-metax.conf", "x")
    f.write("/etc/crio/crio.conf.d/10-other.conf", "y")
    assert f.missing_dirs("/etc/crio/crio.conf.d/99-metax.conf") == ()

    f.remove("/etc/crio/crio.conf.d/99-metax.conf")
    f.remove_dir_if_empty("/etc/crio/crio.conf.d")  # not empty: kept
    assert f.read("/etc/crio/crio.conf.d/10-other.conf") == "y"
    f.remove("/etc/crio/crio.conf.d/10-other.conf")
    f.remove_dir_if_empty("/etc/crio/crio.conf.d")
    assert f.missing_dirs("/etc/crio/crio.conf.d/99-metax.conf") == ("/etc/crio/crio.conf.d",)


def test_scratch_is_private_and_cleaned_with_the_temporaries(host: Backend) -> None:
    f = host.files
    f.write("/etc/containerd/config.toml", "version = 2\n")
    scratch = f.scratch("/etc/containerd/config.toml", "version = 2\n# without ours\n")
    assert scratch.startswith("/etc/containerd/.config.toml.baseline-") and scratch.endswith(".tmp")
    assert f.read(scratch) == "version = 2\n# without ours\n"
    assert f.stat(scratch) is not None and f.stat(scratch).mode == 0o600  # type: ignore[union-attr]
    host.leave("/etc/containerd/.config.toml.x1.tmp", b"half")

    f.clean_temporaries("/etc/containerd/config.toml")

    assert host.listing("/etc/containerd") == ["config.toml"]


def test_temporaries_staged_outside_a_directory_are_cleaned_there(host: Backend) -> None:
    f = host.files
    f.stage_outside("/etc/crio/crio.conf.d")
    f.write("/etc/crio/crio.conf.d/99-metax.conf", "x")
    assert host.listing("/etc/crio/crio.conf.d") == ["99-metax.conf"]
    host.leave("/etc/crio/.99-metax.conf.k1.tmp", b"half")

    f.clean_temporaries("/etc/crio/crio.conf.d/99-metax.conf")

    assert host.listing("/etc/crio") == ["crio.conf.d"]


def test_the_wrapper_is_copied_once_and_executable(host: Backend) -> None:
    f = host.files
    assert f.wrapper_ok("/usr/local/metax/bin/metax-runc") is False
    assert f.install_wrapper(host.source, "/usr/local/metax/bin/metax-runc") is True
    assert f.install_wrapper(host.source, "/usr/local/metax/bin/metax-runc") is False
    assert f.wrapper_ok("/usr/local/metax/bin/metax-runc") is True
    assert f.stat("/usr/local/metax/bin/metax-runc").mode == 0o755  # type: ignore[union-attr]
    with pytest.raises(HardwareError, match="read the wrapper"):
        f.install_wrapper(host.source + "-absent", "/usr/local/metax/bin/other")

    host.leave("/usr/local/metax/bin/.metax-runc.k2.partial", b"half")
    f.clean_partials("/usr/local/metax/bin")
    assert host.listing("/usr/local/metax/bin") == ["metax-runc"]
