"""The test driver payload's image form (metax_dev.kpayload; issue 21 item 5).

Covers: `assemble` writes driver-manager's layout; `write_image` makes an OCI archive whose layer holds the tree
at ``/payload`` and the ``sh``/``mkdir``/``cp`` the init container runs; `unpack_image` gives back exactly the
tree (what the init container's copy leaves in ``METAX_PAYLOAD_DIR``); a release that is not Debian's form is
refused before apt is asked. The compile itself is exercised by tests/realkernel (it needs Debian's headers).
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from metax_core.node import payload_layout
from metax_dev import kpayload

RELEASES = ("6.1.0-56-amd64", "6.1.0-57-amd64")


def test_the_image_carries_the_layout_and_unpacks_to_the_same_tree(tmp_path: Path) -> None:
    built = {}
    for release in RELEASES:
        built[release] = tmp_path / "build" / release / "metax.ko"
        built[release].parent.mkdir(parents=True)
        built[release].write_bytes(f"module for {release}".encode())
    payload = kpayload.assemble(tmp_path / "payload", built)
    assert sorted(str(p.relative_to(payload)) for p in payload.rglob("*.ko")) == [
        payload_layout.module_relpath(r) for r in RELEASES
    ]
    archive = kpayload.write_image(tmp_path / "payload.tar", "metax.test/driver-payload:t", payload)
    with tarfile.open(archive) as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest_digest = index["manifests"][0]["digest"].split(":")[1]
        manifest = json.loads(tar.extractfile(f"blobs/sha256/{manifest_digest}").read())  # type: ignore[union-attr]
        layer = tar.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}").read()  # type: ignore[union-attr]
    with tarfile.open(fileobj=io.BytesIO(layer)) as files:
        members = {m.name: m for m in files.getmembers()}
    assert members["bin/sh"].linkname == "busybox" and members["bin/cp"].issym() and "bin/busybox" in members
    assert f"payload/{payload_layout.module_relpath(RELEASES[1])}" in members
    unpacked = kpayload.unpack_image(archive, tmp_path / "unpacked")
    for release in RELEASES:
        relpath = payload_layout.module_relpath(release)
        assert (unpacked / relpath).read_bytes() == (payload / relpath).read_bytes()


def test_a_release_not_in_debians_form_is_refused() -> None:
    with pytest.raises(RuntimeError, match="not Debian's"):
        kpayload.previous_release("my-custom-kernel")


def test_restamped_headers_name_another_release_and_keep_the_shared_trees(tmp_path: Path) -> None:
    """When the mirror carries one ABI only, the refusal test's module is built from the booted kernel's
    headers re-stamped as the previous ABI: the release Kbuild reads changes, the -common and kbuild trees
    stay the original's (through absolute links), and the original is untouched."""
    root = tmp_path / "orig"
    arch = root / "usr/src/linux-headers-6.1.0-57-amd64"
    (arch / "include/generated").mkdir(parents=True)
    (arch / "include/config").mkdir(parents=True)
    (arch / "include/generated/utsrelease.h").write_text('#define UTS_RELEASE "6.1.0-57-amd64"\n')
    (arch / "include/config/kernel.release").write_text("6.1.0-57-amd64\n")
    (arch / "Makefile").write_text(f"include {root}/usr/src/linux-headers-6.1.0-57-common/Makefile\n")
    (root / "usr/lib/linux-kbuild-6.1/scripts").mkdir(parents=True)
    (arch / "scripts").symlink_to("../../lib/linux-kbuild-6.1/scripts")
    headers = kpayload.Headers("6.1.0-57-amd64", ("linux-headers-6.1.0-57-amd64=1",), root)

    other = kpayload.restamped(headers, "6.1.0-56-amd64", cache=tmp_path / "cache")

    assert other.release == "6.1.0-56-amd64" and other.tree.name == "linux-headers-6.1.0-56-amd64"
    assert '"6.1.0-56-amd64"' in (other.tree / "include/generated/utsrelease.h").read_text()
    assert (other.tree / "include/config/kernel.release").read_text() == "6.1.0-56-amd64\n"
    assert (other.tree / "Makefile").read_text() == (arch / "Makefile").read_text()
    assert (other.tree / "scripts").resolve() == (root / "usr/lib/linux-kbuild-6.1/scripts").resolve()
    assert "57" in (arch / "include/generated/utsrelease.h").read_text()  # the original is as it was
    assert other.packages != headers.packages  # a different module cache key
    assert kpayload.restamped(headers, "6.1.0-56-amd64", cache=tmp_path / "cache").root == other.root  # cached
