"""A fake MXMACA SDK payload image, for tests and benchmarks: an OCI archive written by the test-image writer
(`metax_dev.realnode.images.write_image`) whose ``/payload/maca/`` is a small SDK tree, and the copy of its
``/payload`` that the maca DaemonSet's init container makes (``cp -a /payload/. <dir>/<n>/``).

The tree: ``bin/maca-version`` (a shell script that prints the version), ``lib/libmaca.so`` and ``version``
(text), enough for a container to show it sees the SDK at ``/opt/maca`` read-only with its environment.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

from metax_dev.realnode import images

IMAGE = "metax.test/maca-c500"


def reference(version: str) -> str:
    return f"{IMAGE}:{version}-ubuntu22.04-amd64"


def payload_tree(directory: Path, version: str) -> Path:
    """The payload image's ``/payload`` as a directory (``maca/bin/maca-version``, ``maca/lib``, ``maca/version``)."""
    maca = directory / "maca"
    for name, text in _files(version).items():
        path = maca / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if name.startswith("bin/") else 0o644)
    return directory


def _files(version: str) -> dict[str, str]:
    return {
        "bin/maca-version": f"#!/bin/sh\necho MXMACA {version}\n",
        "lib/libmaca.so": f"fake libmaca {version}\n",
        "version": f"{version}\n",
    }


def write_payload_image(directory: Path, version: str) -> Path:
    """An OCI archive of a maca payload image bringing ``version``."""
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(version)
        entries = []
        for name, text in files.items():
            source = Path(tmp) / name.replace("/", "_")
            source.write_text(text)
            entries.append(
                images.Entry(f"payload/maca/{name}", source, mode=0o755 if name.startswith("bin/") else 0o644)
            )
        directory.mkdir(parents=True, exist_ok=True)
        return images.write_image(
            directory / f"maca-{version}.tar",
            reference(version),
            entries,
            directories=["payload", "payload/maca", "payload/maca/bin", "payload/maca/lib"],
        )


def unpack_payload(archive: Path, target: Path) -> Path:
    """What the init container does: the image's ``/payload`` copied to ``target``."""
    with tarfile.open(archive) as oci:
        index = json.load(oci.extractfile("index.json"))  # type: ignore[arg-type]
        manifest_digest = index["manifests"][0]["digest"].split(":", 1)[1]
        manifest = json.load(oci.extractfile(f"blobs/sha256/{manifest_digest}"))  # type: ignore[arg-type]
        layer_digest = manifest["layers"][0]["digest"].split(":", 1)[1]
        layer = oci.extractfile(f"blobs/sha256/{layer_digest}").read()  # type: ignore[union-attr]
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("payload/") and m.name != "payload"]
        for m in members:
            m.name = m.name.removeprefix("payload/")
        tar.extractall(target, members=members, filter="tar")
    return target
