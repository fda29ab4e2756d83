"""A CycloneDX SBOM of each product image: its Debian packages, its Python packages and the project itself.

Why a module of its own: issue 39 asks for an SBOM per image. What an image holds is read from the image, not
from its recipe: the Debian packages from its own ``/var/lib/dpkg/status`` (name, version, architecture), its
distribution from its ``os-release``; the Python packages are ``images/requirements.lock``'s (the deps layer
installs exactly those: tests/images/test_sbom.py compares them with the image's ``*.dist-info``). The document
is made and serialised by ``cyclonedx-python-lib`` (CycloneDX 1.6 JSON), a build-time dependency (the test
extra), never a runtime one: nothing in the images imports this module.
"""

from __future__ import annotations

import datetime
import json
import os
import tarfile
import tomllib
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Final

from cyclonedx.contrib.this import builders as this
from cyclonedx.model import Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import DisjunctiveLicense
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from metax_dev.images import buildah, definitions, platforms

STATUS: Final = "var/lib/dpkg/status"
OS_RELEASE: Final = ("usr/lib/os-release", "etc/os-release")
SUFFIX: Final = ".cdx.json"


def path_for(archive: Path) -> Path:
    """``<out>/<name>.cdx.json`` next to ``<out>/<name>.tar``."""
    return archive.with_name(archive.name.removesuffix(".tar") + SUFFIX)


def _archive_files(archive: Path, wanted: Iterable[str]) -> dict[str, bytes]:
    """The files `wanted` as the image's root has them: its layers read from the top one down."""
    want = set(wanted)
    found: dict[str, bytes] = {}
    with tarfile.open(archive) as outer:

        def blob(digest: str) -> IO[bytes]:
            member = outer.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
            if member is None:
                raise buildah.ImageBuildError(f"{archive}: no blob {digest}")
            return member

        manifest = json.load(blob(json.load(_member(outer, "index.json"))["manifests"][0]["digest"]))
        for layer in reversed(manifest["layers"]):
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r:*") as tar:
                for member in tar:
                    path = member.name.removeprefix("./")
                    if path in want and path not in found and member.isfile():
                        handle = tar.extractfile(member)
                        if handle is not None:
                            found[path] = handle.read()
            if want <= set(found):
                break
    return found


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    member = tar.extractfile(name)
    if member is None:
        raise buildah.ImageBuildError(f"{tar.name!r}: no {name}")
    return member


def _read(image: Path) -> tuple[str, str]:
    """(dpkg status, os-release) of an image root directory or a one-image OCI archive."""
    if image.is_dir():
        release = next((image / p for p in OS_RELEASE if (image / p).is_file()), None)
        if release is None or not (image / STATUS).is_file():
            raise buildah.ImageBuildError(f"{image}: no /{STATUS} or os-release: not a Debian image root")
        return (image / STATUS).read_text(), release.read_text()
    files = _archive_files(image, (STATUS, *OS_RELEASE))
    release_text = next((files[p] for p in OS_RELEASE if p in files), None)
    if STATUS not in files or release_text is None:
        raise buildah.ImageBuildError(f"{image}: no /{STATUS} or os-release in its layers")
    return files[STATUS].decode(), release_text.decode()


def dpkg_packages(status: str) -> list[dict[str, str]]:
    """The installed packages of a dpkg status file: each stanza's single-line fields."""
    packages = []
    for stanza in status.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            packages.append(fields)
    return sorted(packages, key=lambda f: f["Package"])


def distro(os_release: str) -> str:
    """``debian-12``: purl's ``distro`` qualifier from an os-release file's ``ID`` and ``VERSION_ID``."""
    fields = dict(line.split("=", 1) for line in os_release.splitlines() if "=" in line)
    return f"{fields.get('ID', 'debian').strip(chr(34))}-{fields.get('VERSION_ID', '').strip(chr(34))}".rstrip("-")


def lock_packages(lock: Path) -> list[tuple[str, str]]:
    """(name, version) of each ``name==version`` line of a requirements lock."""
    pins = []
    for raw in lock.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" in line:
            name, _, pinned = line.partition("==")
            pins.append((name.strip(), pinned.split(";", 1)[0].strip()))
    return sorted(pins)


def _components(status: str, os_release: str, lock: Path) -> Iterator[Component]:
    qualifier = distro(os_release)
    namespace = qualifier.split("-", 1)[0]
    for pkg in dpkg_packages(status):
        purl = PackageURL(
            type="deb",
            namespace=namespace,
            name=pkg["Package"],
            version=pkg["Version"],
            qualifiers={"arch": pkg.get("Architecture", ""), "distro": qualifier},
        )
        properties = [Property(name="metax:deb:source", value=pkg["Source"])] if "Source" in pkg else []
        yield Component(
            name=pkg["Package"], version=pkg["Version"], purl=purl, bom_ref=purl.to_string(), properties=properties
        )
    for name, pinned in lock_packages(lock):
        purl = PackageURL(type="pypi", name=name, version=pinned)
        yield Component(name=name, version=pinned, purl=purl, bom_ref=purl.to_string())


def sbom(
    image: Path,
    platform: platforms.Platform,
    *,
    name: str,
    reference: str,
    digest: str,
    created: int,
    repo: Path = definitions.REPO,
    lock: Path | None = None,
) -> dict[str, Any]:
    """The CycloneDX 1.6 document (as JSON data) of the image `name` (``reference``, manifest ``digest``) on
    `platform`, whose root filesystem is `image` (a directory, or the one-image OCI archive itself).

    ``metadata.component`` is the project (its version from pyproject.toml); the image's name, reference,
    digest and platform are ``metadata.properties``; `created` (seconds since the epoch) is its timestamp, and
    the serial number is derived from the reference and digest, so the same image gives the same document.
    """
    status, os_release = _read(image)
    project_meta = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    lock = lock or definitions.load(repo / "images" / "images.toml").app.lock
    project_purl = PackageURL(type="pypi", name=project_meta["name"], version=project_meta["version"])
    project = Component(
        name=project_meta["name"],
        version=project_meta["version"],
        type=ComponentType.APPLICATION,
        purl=project_purl,
        bom_ref=project_purl.to_string(),
        licenses=[DisjunctiveLicense(id=project_meta["license"])],
    )
    components = list(_components(status, os_release, lock))
    image_properties: Mapping[str, str] = {
        "metax:image:name": name,
        "metax:image:reference": reference,
        "metax:image:digest": digest,
        "metax:image:platform": platform.name,
    }
    bom = Bom(
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"{reference}@{digest}"),
        metadata=BomMetaData(
            component=project,
            timestamp=datetime.datetime.fromtimestamp(created, tz=datetime.UTC),
            properties=[Property(name=k, value=v) for k, v in image_properties.items()],
        ),
        components=components,
    )
    bom.metadata.tools.components.add(this.this_component())
    bom.register_dependency(project, [c for c in components if c.purl is not None and c.purl.type == "pypi"])
    document: dict[str, Any] = json.loads(JsonV1Dot6(bom).output_as_string())
    return document


def write(document: Mapping[str, Any], path: Path) -> Path:
    """Write `document` to `path` (atomically: a reader never sees half of it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(tmp, path)
    return path
