"""Container images made here from local files: no registry is reachable, and none is needed.

Why this module exists: a real node needs a sandbox ("pause") image and test pods need an image with a
shell. Both are one-layer OCI image archives written from files on this machine: the ``pause`` program
built by the cached build, and Debian's ``busybox-static`` (one static binary plus a link per applet).
Each node's containerd imports them with ``ctr -n k8s.io images import``; pods use
``imagePullPolicy: Never``. The sandbox image carries the name containerd 2.4 asks for by default
(:data:`PAUSE_IMAGE`), so containerd never tries to pull it.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_dev.realnode import errors

#: The sandbox image containerd v2.4 uses unless configured otherwise.
PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10.2"
#: The test pods' image: busybox-static from Debian.
BUSYBOX_IMAGE: Final = "metax.test/busybox:1"
BUSYBOX: Final = Path("/bin/busybox")

_LAYER: Final = "application/vnd.oci.image.layer.v1.tar"
_CONFIG: Final = "application/vnd.oci.image.config.v1+json"
_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
_INDEX: Final = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class Entry:
    """One file of an image's only layer: contents from ``source``, or a symlink to ``link``."""

    path: str
    source: Path | None = None
    link: str | None = None
    mode: int = 0o755


def _layer(entries: Sequence[Entry], directories: Sequence[str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in directories:
            info = tarfile.TarInfo(directory.strip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for entry in entries:
            info = tarfile.TarInfo(entry.path.strip("/"))
            info.mode = entry.mode
            if entry.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.link
                tar.addfile(info)
            elif entry.source is not None:
                data = entry.source.read_bytes()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest.split(':', 1)[1]}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return digest


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_image(
    path: Path,
    name: str,
    entries: Sequence[Entry],
    *,
    directories: Sequence[str] = (),
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Path:
    """An OCI image archive (``oci-layout``, ``index.json``, blobs) of one uncompressed layer."""
    layer = _layer(entries, directories)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": [f"{k}={v}" for k, v in (env or {"PATH": "/bin"}).items()],
            "Entrypoint": list(entrypoint) or None,
            "Cmd": list(cmd) or None,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        layer_digest = _blob(tar, layer)
        config_bytes = _json(config)
        config_digest = _blob(tar, config_bytes)
        manifest = _json(
            {
                "schemaVersion": 2,
                "mediaType": _MANIFEST,
                "config": {"mediaType": _CONFIG, "digest": config_digest, "size": len(config_bytes)},
                "layers": [{"mediaType": _LAYER, "digest": layer_digest, "size": len(layer)}],
            }
        )
        manifest_digest = _blob(tar, manifest)
        index = _json(
            {
                "schemaVersion": 2,
                "mediaType": _INDEX,
                "manifests": [
                    {
                        "mediaType": _MANIFEST,
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "platform": {"architecture": "amd64", "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                        },
                    }
                ],
            }
        )
        for member, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def busybox_applets(busybox: Path = BUSYBOX) -> list[str]:
    """The applets this busybox provides (``busybox --list``)."""
    done = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise errors.NodeError(f"`{busybox} --list` failed: {done.stderr.strip()}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def write_test_images(directory: Path, pause: Path, busybox: Path = BUSYBOX) -> list[Path]:
    """The sandbox image and the busybox image as archives in ``directory``."""
    if not busybox.is_file():
        raise errors.NodeError(f"{busybox} is missing: install Debian's busybox-static (`./run test` does)")
    directory.mkdir(parents=True, exist_ok=True)
    pause_tar = write_image(directory / "pause.tar", PAUSE_IMAGE, [Entry("pause", pause)], entrypoint=["/pause"])
    links = [Entry(f"bin/{a}", link="busybox") for a in busybox_applets(busybox) if a != "busybox"]
    busybox_tar = write_image(
        directory / "busybox.tar",
        BUSYBOX_IMAGE,
        [Entry("bin/busybox", busybox), *links],
        directories=["bin", "dev", "etc", "proc", "sys", "tmp"],
        cmd=["sh"],
    )
    return [pause_tar, busybox_tar]


def write_payload_image(path: Path, name: str, payload: Path, busybox: Path = BUSYBOX) -> Path:
    """A TEST payload image (a driver or SDK payload as the operator's init containers expect it,
    docs/configuration.md): ``payload``'s files under ``/payload``, and busybox for the init container's
    ``/bin/sh -c 'mkdir -p ... && cp -a /payload/. ...'``."""
    if not busybox.is_file():
        raise errors.NodeError(f"{busybox} is missing: install Debian's busybox-static (`./run test` does)")
    links = [Entry(f"bin/{a}", link="busybox") for a in busybox_applets(busybox) if a != "busybox"]
    files = sorted(f for f in payload.rglob("*") if f.is_file())
    dirs = sorted({str(Path("payload") / d.relative_to(payload)) for d in payload.rglob("*") if d.is_dir()})
    carried = [Entry(f"payload/{f.relative_to(payload)}", f, mode=_mode(f)) for f in files]
    return write_image(
        path,
        name,
        [Entry("bin/busybox", busybox), *links, *carried],
        directories=["bin", "dev", "etc", "proc", "sys", "tmp", "payload", *dirs],
        cmd=["sh"],
    )


def _mode(file: Path) -> int:
    """0755 for an executable of the payload (the driver's tools, ``bin/mx-smi``), else 0644."""
    return 0o755 if file.stat().st_mode & 0o111 else 0o644


def import_images(ctr: Path, address: Path, archives: Sequence[Path]) -> None:
    """Import ``archives`` into the containerd at ``address`` (namespace ``k8s.io``, unpacked)."""
    for archive in archives:
        done = subprocess.run(
            [str(ctr), "--address", str(address), "-n", "k8s.io", "images", "import", str(archive)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise errors.NodeError(f"`ctr images import {archive.name}` failed: {(done.stderr or done.stdout).strip()}")
