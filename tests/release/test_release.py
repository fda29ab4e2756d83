"""A release in a real registry and the air-gapped bundle (issue 39 items 2, 4 and 6; R-RELEASE, R-IMAGES).

Against Debian's docker-registry on loopback (TLS from the harness's CA, htpasswd: `metax_dev.registry`), each
test with a registry of its own:

- ``./run release`` (`metax_dev.release.__main__`) pushes every image as one OCI image index listing linux/amd64
  and linux/arm64, and the registry serves each under its tag with the digest the release computed;
- the chart, pulled back with ``helm pull oci://…``, pins every image by that digest: rendered with the real helm,
  the operator's image is ``<registry>/metax-operator:<version>@<digest>`` and the variable the operator reads
  (`image_refs.decode_digests`, the reader) holds exactly the pushed digests; nothing per architecture;
- ``SHA256SUMS`` verifies with coreutils' ``sha256sum -c``; every image has an SBOM per platform naming it;
- the bundle, loaded by ``./run mirror`` into a fresh registry, serves the same digests; a damaged bundle is
  refused before anything is pushed, naming the damaged file;
- a registry that would be Docker Hub's is refused naming the flag.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from metax_core.cluster import image_refs
from metax_dev import cli as dev_cli
from metax_dev import registry as test_registry
from metax_dev.images import definitions
from metax_dev.release import __main__ as release_cli
from metax_dev.release import bundle, layout, publish
from metax_dev.release.target import ReleaseError, Target

PROJECT = "metax"


@pytest.fixture
def fresh_registry(tmp_path: Path) -> Iterator[test_registry.Registry]:
    with test_registry.started(tmp_path / "registry") as r:
        yield r


def _target(r: test_registry.Registry, tmp_path: Path) -> Target:
    return Target(f"{r.host}/{PROJECT}", authfile=r.auth_file(tmp_path / "auth.json"), cert_dir=r.cert_dir)


def _helm(*args: str) -> str:
    done = subprocess.run([publish.helm_binary(), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_release_pushes_one_index_per_image_with_both_platforms(
    made_release: publish.Release,
    fresh_registry: test_registry.Registry,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = _target(fresh_registry, tmp_path)
    argv = ["release", "--registry", target.registry, "--out", str(tmp_path / "out")]
    argv += ["--authfile", str(target.authfile), "--cert-dir", str(target.cert_dir)]
    assert release_cli.main(argv) == 0
    said = capsys.readouterr().out
    assert target.install_line(made_release.version) in said
    names = {i.name for i in definitions.load(definitions.REPO / "images" / "images.toml").images}
    assert set(made_release.layout.digests) == names
    for name, digest in made_release.layout.digests.items():
        # What the registry's own API serves under the tag (not what skopeo said it pushed).
        served = fresh_registry.manifest(f"{PROJECT}/{name}", made_release.version)
        assert served.digest == digest, name
        index = served.json()
        assert isinstance(index, dict) and index["mediaType"] == layout.INDEX_MEDIA_TYPE
        platforms = sorted(f"{m['platform']['os']}/{m['platform']['architecture']}" for m in index["manifests"])
        assert platforms == sorted(publish.PLATFORMS), name
    assert f"{PROJECT}/charts/metax-operator" in fresh_registry.catalog()


def test_the_pushed_chart_pins_every_image_by_the_pushed_digest(
    made_release: publish.Release, fresh_registry: test_registry.Registry, tmp_path: Path
) -> None:
    target = _target(fresh_registry, tmp_path)
    pushed = publish.push_layout(made_release.layout, made_release.chart, target)
    assert pushed.served == made_release.layout.digests
    pulled = tmp_path / "pulled"
    pulled.mkdir()  # helm pull -d writes into an existing directory
    _helm("pull", target.chart_reference(), "--version", made_release.version, "-d", str(pulled), *target.helm_flags())
    (archive,) = pulled.glob("*.tgz")
    with tarfile.open(archive) as tar:
        tar.extractall(pulled, filter="data")
    values = yaml.safe_load((pulled / "metax-operator" / "values.yaml").read_text())
    assert values["operator"]["imageDigests"] == made_release.layout.digests
    rendered = _helm("template", "x", str(pulled / "metax-operator"), "--set", f"registry={target.registry}")
    deployment = next(
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "metax-operator"
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    pinned = made_release.layout.digests["metax-operator"]
    assert container["image"] == f"{target.registry}/metax-operator:{made_release.version}@{pinned}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert image_refs.decode_digests(env[image_refs.DIGESTS_ENV]) == made_release.layout.digests


def test_sums_verify_with_coreutils_and_every_image_has_an_sbom_per_platform(made_release: publish.Release) -> None:
    done = subprocess.run(
        ["sha256sum", "-c", publish.SUMS], cwd=made_release.out, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = {line.split("  ", 1)[1] for line in (made_release.out / publish.SUMS).read_text().splitlines()}
    for platform in publish.PLATFORMS:
        for name in made_release.layout.digests:
            sbom = Path("sbom") / f"{name}.{platform.replace('/', '-')}.cdx.json"
            assert str(sbom) in listed
            document = json.loads((made_release.out / sbom).read_text())
            assert document["bomFormat"] == "CycloneDX"
            assert name in json.dumps(document["metadata"]), f"{sbom} does not name its image"


@pytest.fixture(scope="module")
def bundled(made_release: publish.Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bundle.write(made_release, tmp_path_factory.mktemp("bundle") / bundle.name(made_release.version))


def test_a_bundle_mirrored_into_a_fresh_registry_serves_the_release(
    made_release: publish.Release, bundled: Path, fresh_registry: test_registry.Registry, tmp_path: Path
) -> None:
    target = _target(fresh_registry, tmp_path)
    mirrored = bundle.mirror(bundled, target)
    assert mirrored.served == made_release.layout.digests
    assert mirrored.install == target.install_line(made_release.version)
    for name, digest in made_release.layout.digests.items():
        assert fresh_registry.manifest(f"{PROJECT}/{name}", made_release.version).digest == digest


def test_a_damaged_bundle_is_refused_before_anything_is_pushed(
    made_release: publish.Release, bundled: Path, fresh_registry: test_registry.Registry, tmp_path: Path
) -> None:
    unpacked = tmp_path / "unpacked"
    with tarfile.open(bundled) as tar:
        tar.extractall(unpacked, filter="data")
    blob = max((unpacked / "oci" / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    damaged = tmp_path / "damaged.tar"
    with tarfile.open(damaged, "w") as tar:
        for path in sorted(unpacked.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(unpacked)), recursive=False)
    with pytest.raises(ReleaseError, match=blob.name):
        bundle.mirror(damaged, _target(fresh_registry, tmp_path))
    assert fresh_registry.catalog() == []


@pytest.mark.parametrize("registry", ["", "metax", "metax/project", "https://registry.example.com/metax"])
def test_a_registry_that_is_no_registry_host_is_refused_naming_the_flag(
    registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert release_cli.main(["release", "--registry", registry, "--platforms", "linux/amd64"]) == 1
    said = capsys.readouterr().err
    assert "--registry" in said and "registry.example.com/metax" in said


def test_metax_dev_has_the_same_verbs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``metax-dev mirror`` is ``./run mirror`` (issue 39 item 4): the same parser, the same refusals."""
    assert dev_cli.main(["mirror", str(tmp_path / "bundle.tar"), "--registry", "metax"]) == 1
    assert "--registry 'metax'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        dev_cli.main(["mirror", "--help"])
    assert "--cert-dir" in capsys.readouterr().out
