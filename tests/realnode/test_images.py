"""The local images are valid OCI image archives: every digest matches its blob, the index names the
image as containerd imports it, the busybox layer holds the binary and a link per applet, and the
config's diff ID is the layer's digest."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from metax_dev.realnode import images

pytestmark = pytest.mark.realnode


def blobs(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        out = {}
        for member in tar.getmembers():
            handle = tar.extractfile(member)
            if handle is not None:
                out[member.name] = handle.read()
        return out


def test_busybox_and_pause_archives(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    pause.write_bytes(b"\x7fELF pretend")
    pause_tar, busybox_tar = images.write_test_images(tmp_path / "out", pause)

    for archive, name in ((pause_tar, images.PAUSE_IMAGE), (busybox_tar, images.BUSYBOX_IMAGE)):
        files = blobs(archive)
        assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
        for path, data in files.items():
            if path.startswith("blobs/sha256/"):
                assert hashlib.sha256(data).hexdigest() == path.rsplit("/", 1)[1]
        [entry] = json.loads(files["index.json"])["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == name
        assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
        manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
        config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
        [layer] = manifest["layers"]
        assert config["rootfs"]["diff_ids"] == [layer["digest"]]

    files = blobs(busybox_tar)
    entry = json.loads(files["index.json"])["manifests"][0]
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    layer = files["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].size == images.BUSYBOX.stat().st_size
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert {"bin/sleep", "bin/stat", "bin/tr"} <= set(members)
