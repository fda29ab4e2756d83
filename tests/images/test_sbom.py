"""Each image's SBOM (issue 39, item 2; docs/images.md "SBOM"): ``<name>.cdx.json`` next to its archive.

- it is valid CycloneDX 1.6 JSON by the library's own strict schema validator, for every image of both
  platforms, and names its image (name, reference, digest, platform) and the project (version);
- its Debian packages are exactly the image's (``dpkg-query --admindir`` on the unpacked root), with their
  versions and architecture; its Python packages are exactly the ``*.dist-info`` of the image's venv (the
  project's own aside), with their versions;
- made from the archive itself instead of the build's root, it is the same document.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from metax_dev.images import build, definitions, platforms, sbom

SITE = "opt/metax/lib/python3.11/site-packages"


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _dpkg(rootfs: Path) -> dict[str, tuple[str, str]]:
    """Package -> (version, architecture), as dpkg itself reads the image's database."""
    out = subprocess.run(
        ["dpkg-query", f"--admindir={rootfs}/var/lib/dpkg", "-W", "-f", "${Package}\t${Version}\t${Architecture}\n"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {name: (ver, arch) for name, ver, arch in (line.split("\t") for line in out.splitlines())}


def _dist_infos(rootfs: Path) -> dict[str, str]:
    found = {}
    for d in (rootfs / SITE).glob("*.dist-info"):
        name, version = d.name.removesuffix(".dist-info").rsplit("-", 1)
        found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def test_every_sbom_is_valid_cyclonedx_and_names_its_image(built: build.Built, built_arm64: build.Built) -> None:
    validator = JsonStrictValidator(SchemaVersion.V1_6)
    version = tomllib.loads((definitions.REPO / "pyproject.toml").read_text())["project"]["version"]
    for b in (built, built_arm64):
        assert set(b.sboms) == set(b.archives)
        for name, path in b.sboms.items():
            assert path == b.archives[name].with_name(f"{name}.cdx.json")
            text = path.read_text()
            assert validator.validate_str(text, all_errors=True) is None, path
            doc = json.loads(text)
            assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
            props = {p["name"]: p["value"] for p in doc["metadata"]["properties"]}
            assert props == {
                "metax:image:name": name,
                "metax:image:reference": build.qualified(b.references[name]),
                "metax:image:digest": b.digests[name],
                "metax:image:platform": b.platform,
            }
            project = doc["metadata"]["component"]
            assert (project["name"], project["version"], project["type"]) == (
                "metax-gpu-operator",
                version,
                "application",
            )


def test_the_debian_and_python_packages_are_exactly_the_images(
    built: build.Built, built_arm64: build.Built, rootfs: Path, rootfs_arm64: Path
) -> None:
    for b, root, p in ((built, rootfs, platforms.AMD64), (built_arm64, rootfs_arm64, platforms.ARM64)):
        doc = _load(b.sboms["metax-gpu-device"])
        debs = {c["name"]: c for c in doc["components"] if c["purl"].startswith("pkg:deb/")}
        pypi = {c["name"]: c["version"] for c in doc["components"] if c["purl"].startswith("pkg:pypi/")}
        installed = _dpkg(root)
        assert {n: c["version"] for n, c in debs.items()} == {n: v for n, (v, _) in installed.items()}, p.name
        for known in ("python3", "libstdc++6", "kmod", "libc6"):
            version, arch = installed[known]
            assert arch == p.arch, (known, arch)
            purl = PackageURL.from_string(debs[known]["purl"])  # percent-decoded: libstdc%2B%2B6 is libstdc++6
            assert (purl.type, purl.namespace, purl.name, purl.version) == ("deb", "debian", known, version), purl
            assert purl.qualifiers == {"arch": p.arch, "distro": "debian-12"}, purl
            assert debs[known]["version"] == version
        dist_infos = _dist_infos(root)
        assert dist_infos.pop("metax-gpu-operator")
        assert pypi == dist_infos, p.name
        assert pypi["grpcio"] == dist_infos["grpcio"]
        assert "pkg:pypi/grpcio@" + pypi["grpcio"] in {c["purl"] for c in doc["components"]}


def test_the_sbom_made_from_the_archive_is_the_one_written(built_arm64: build.Built) -> None:
    name = "metax-driver"
    written = _load(built_arm64.sboms[name])
    again = sbom.sbom(
        built_arm64.archives[name],
        platforms.ARM64,
        name=name,
        reference=build.qualified(built_arm64.references[name]),
        digest=built_arm64.digests[name],
        created=int(datetime.datetime.fromisoformat(written["metadata"]["timestamp"]).timestamp()),
    )
    assert again == written
