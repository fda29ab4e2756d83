"""The built images of every platform as one OCI layout: one image index per image, their layers stored once.

Why a module of its own: a registry serves a multi-platform image as an OCI image index (the node's containerd
picks its own platform's manifest from it), and the air-gapped bundle carries the same indexes as files. Both
are made here by Debian's buildah (``buildah manifest create/add/push --all``) from the per-platform OCI
archives `metax_dev.images.build` writes; the index digest is what the chart pins (`image_refs`). The images
share their layers, so the layout stores each blob once however many images name it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_dev.images import buildah
from metax_dev.release.target import ReleaseError

INDEX_MEDIA_TYPE: Final = "application/vnd.oci.image.index.v1+json"
REF_NAME: Final = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Layout:
    path: Path
    version: str
    digests: dict[str, str]
    """Image name -> its image index's digest (what the registry serves and the chart pins)."""

    def reference(self, name: str) -> str:
        """skopeo's name of an image in the layout: ``oci:<path>:<name>:<version>``."""
        return f"oci:{self.path}:{name}:{self.version}"


def ref_name(name: str, version: str) -> str:
    return f"{name}:{version}"


def write(archives: Mapping[str, Mapping[str, Path]], version: str, path: Path, storage: Path) -> Layout:
    """Write (or extend) the OCI layout at `path` with one index per image of `archives` (platform -> image name
    -> OCI archive; every platform the same images). `storage` is buildah's (its manifest lists live there)."""
    platforms = sorted(archives)
    if not platforms:
        raise ReleaseError("layout: no platform built")
    names = sorted(archives[platforms[0]])
    for platform in platforms[1:]:
        if sorted(archives[platform]) != names:
            raise ReleaseError(f"layout: {platform} built {sorted(archives[platform])}, {platforms[0]} {names}")
    b = buildah.Buildah(storage)
    digests = {}
    for name in names:
        listed = f"localhost/metax-release/{name}:{version}"
        _remove_list(b, listed)
        b("manifest", "create", listed, step=f"{name}: buildah manifest create")
        for platform in platforms:
            b("manifest", "add", listed, f"oci-archive:{archives[platform][name]}", step=f"{name}: add {platform}")
        digest_file = storage / "tmp" / f"{name}.digest"
        digest_file.parent.mkdir(parents=True, exist_ok=True)
        b(
            "manifest",
            "push",
            "--all",
            "--format",
            "oci",
            "--digestfile",
            str(digest_file),
            listed,
            f"oci:{path}:{ref_name(name, version)}",
            step=f"{name}: buildah manifest push --all (OCI layout)",
        )
        _remove_list(b, listed)
        digests[name] = digest_file.read_text().strip()
    layout = Layout(path, version, digests)
    _check(layout, platforms)
    return layout


def _remove_list(b: buildah.Buildah, listed: str) -> None:
    if b.has_manifest_list(listed):  # a list left by an interrupted release
        b("manifest", "rm", listed, step=f"buildah manifest rm {listed}")


def read(path: Path, version: str) -> Layout:
    """The layout at `path` as written by `write` (a bundle's): each ref ``<name>:<version>``'s index digest."""
    index = json.loads((path / "index.json").read_text())
    digests = {}
    for entry in index["manifests"]:
        ref = entry.get("annotations", {}).get(REF_NAME, "")
        name, _, tag = ref.rpartition(":")
        if tag == version and entry["mediaType"] == INDEX_MEDIA_TYPE:
            digests[name] = str(entry["digest"])
    return Layout(path, version, digests)


def platforms_of(layout: Layout, name: str) -> list[str]:
    """The ``os/architecture`` of each manifest in image `name`'s index, as the layout stores it."""
    algorithm, _, hexdigest = layout.digests[name].partition(":")
    index = json.loads((layout.path / "blobs" / algorithm / hexdigest).read_text())
    return sorted(f"{m['platform']['os']}/{m['platform']['architecture']}" for m in index["manifests"])


def _check(layout: Layout, platforms: list[str]) -> None:
    """Every index in the layout lists exactly the platforms built (the manifest list took each archive's own
    os/architecture from its config: a mislabelled archive is caught here, not on a node)."""
    on_disk = read(layout.path, layout.version)
    for name, digest in layout.digests.items():
        if on_disk.digests.get(name) != digest:
            raise ReleaseError(f"layout: {name} is {on_disk.digests.get(name)} in index.json, pushed {digest}")
        if (found := platforms_of(layout, name)) != platforms:
            raise ReleaseError(f"layout: {name}'s index lists {found}, built {platforms}")
