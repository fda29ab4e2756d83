"""The air-gapped bundle: one archive with the chart, every image of every platform as an OCI layout, the SBOMs
and checksums; and loading it into a private registry (``./run mirror``).

Why a module of its own: MetaX GPU clusters are often air-gapped (issue 39 item 4). The bundle is made where the
images are built, carried across, checked (every file against ``SHA256SUMS``, every blob against its own
content address) and loaded with skopeo and helm, which print nothing that needs this repository: `commands`
lists the exact commands, so a site can run them by hand.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_dev.release import layout as oci_layout
from metax_dev.release import publish
from metax_dev.release.target import ReleaseError, Target

MANIFEST: Final = "bundle.json"
"""What the bundle holds: version, platforms, every image's index digest, the chart's file name."""


def name(version: str) -> str:
    return f"metax-operator-{version}-bundle.tar"


def write(release: publish.Release, destination: Path) -> Path:
    """`release`'s files (`publish.make`) as one tar at `destination` (uncompressed: the layers already are)."""
    manifest = {
        "version": release.version,
        "platforms": list(release.platforms),
        "images": dict(sorted(release.layout.digests.items())),
        "chart": release.chart.name,
    }
    (release.out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    layout_files = [release.layout.path / "index.json", release.layout.path / "oci-layout"]
    publish.write_sums(
        release.out,
        [release.chart, *release.sboms, release.out / publish.IMAGES_LIST, release.out / MANIFEST, *layout_files],
    )
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(release.out.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(release.out)), recursive=False, filter=_normalized)
    tmp.rename(destination)
    return destination


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


@dataclass(frozen=True)
class Opened:
    root: Path
    version: str
    platforms: list[str]
    digests: dict[str, str]
    chart: Path

    @property
    def layout(self) -> oci_layout.Layout:
        return oci_layout.Layout(self.root / "oci", self.version, self.digests)


@contextmanager
def opened(bundle: Path) -> Iterator[Opened]:
    """The bundle unpacked in a temporary directory and verified: every file of ``SHA256SUMS`` and every blob of
    the layout (its sha256 is its name), and the layout's indexes are the manifest's."""
    with tempfile.TemporaryDirectory(prefix="metax-bundle.") as tmp:
        root = Path(tmp)
        with tarfile.open(bundle) as tar:
            tar.extractall(root, filter="data")
        manifest = json.loads((root / MANIFEST).read_text())
        _verify(root)
        opened_ = Opened(root, manifest["version"], manifest["platforms"], manifest["images"], root / manifest["chart"])
        found = oci_layout.read(opened_.layout.path, opened_.version).digests
        if found != opened_.digests:
            raise ReleaseError(f"{bundle}: the layout's images {found} are not the manifest's {opened_.digests}")
        yield opened_


def _verify(root: Path) -> None:
    for line in (root / publish.SUMS).read_text().splitlines():
        expected, _, relative = line.partition("  ")
        if publish.sha256_file(root / relative) != expected:
            raise ReleaseError(f"{relative}: its sha256 is not the one {publish.SUMS} gives (a damaged bundle)")
    for blob in (root / "oci" / "blobs" / "sha256").iterdir():
        if publish.sha256_file(blob) != blob.name:
            raise ReleaseError(f"oci/blobs/sha256/{blob.name}: content does not match its digest (a damaged bundle)")


def commands(opened_: Opened, target: Target) -> list[list[str]]:
    """What loading the bundle runs: one ``skopeo copy --all --preserve-digests`` per image, ``helm push``."""
    images = [publish.copy_argv(opened_.layout, n, target) for n in sorted(opened_.digests)]
    return [*images, publish.chart_push_argv(opened_.chart, target)]


@dataclass(frozen=True)
class Mirrored:
    version: str
    served: dict[str, str]
    seconds: float
    install: str


def mirror(bundle: Path, target: Target) -> Mirrored:
    """Load `bundle` into `target`'s registry (`publish.push_layout`: each image's served digest is the bundle's)."""
    started = time.monotonic()
    with opened(bundle) as o:
        pushed = publish.push_layout(o.layout, o.chart, target)
        return Mirrored(o.version, pushed.served, time.monotonic() - started, target.install_line(o.version))
