"""The previous release (N-1) the upgrade tests start from: a real bundle built by its own commit's code, cached
(issue 40 item 5; `metax_dev.release.previous`, docs/images.md "The previous release (N-1)").

- the bundle `previous.bundle` returns opens and verifies (`bundle.opened`); its chart says the previous version,
  every image in ``images.txt`` is ``<name>:<version>@sha256:…`` with the layout's digest, the image names are
  those the commit's own ``images/images.toml`` declares (read with ``git show``, not HEAD's), and the images'
  revision label is the commit (its own tree built them, with its git identity);
- a second call returns the same file without building: same path, inode and mtime, under a second;
- a build that fails (a commit without the release code, a commit not in the clone) is a `ReleaseError` naming
  the commit and the step, with the tool's words, and leaves no cache entry;
- ``previous.toml`` that lacks a field or has a malformed one is refused naming the field.
"""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from metax_dev.images import build as images_build
from metax_dev.release import bundle, previous, publish
from metax_dev.release.target import ReleaseError

REVISION_LABEL = "org.opencontainers.image.revision"


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=previous.REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def the_previous() -> previous.Previous:
    return previous.load()


@pytest.fixture(scope="module")
def previous_bundle(the_previous: previous.Previous) -> Path:
    """The real thing: built by the commit's own code the first time on this machine, from the cache after."""
    return previous.bundle(previous.DEFAULT_PLATFORMS)


@pytest.mark.slow
def test_the_previous_bundle_is_that_commits_release(
    the_previous: previous.Previous, previous_bundle: Path, tmp_path: Path
) -> None:
    assert previous_bundle.parent == previous.entry(the_previous, previous.DEFAULT_PLATFORMS)
    declared = tomllib.loads(_git("show", f"{the_previous.commit}:images/images.toml"))
    names = {image["name"] for image in declared["image"]}
    with bundle.opened(previous_bundle) as opened:
        assert opened.version == the_previous.version
        assert opened.platforms == list(previous.DEFAULT_PLATFORMS)
        with tarfile.open(opened.chart) as chart:
            member = next(m for m in chart.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml"))
            handle = chart.extractfile(member)
            assert handle is not None
            chart_yaml = yaml.safe_load(handle)
        assert chart_yaml["version"] == the_previous.version
        assert str(chart_yaml["appVersion"]) == the_previous.version
        listed = (opened.root / publish.IMAGES_LIST).read_text().splitlines()
        pattern = re.compile(
            rf"(?P<name>[a-z0-9-]+):{re.escape(the_previous.version)}@(?P<digest>sha256:[0-9a-f]{{64}})"
        )
        references = {}
        for line in listed:
            match = pattern.fullmatch(line)
            assert match, f"{publish.IMAGES_LIST}: {line!r} is not <name>:{the_previous.version}@sha256:…"
            references[match["name"]] = match["digest"]
        assert set(references) == names
        assert references == opened.digests
        for name, digest in sorted(opened.digests.items()):
            assert _labels(opened.root / "oci", digest)[REVISION_LABEL] == the_previous.commit, name


def _labels(layout: Path, index_digest: str) -> dict[str, str]:
    """The config labels of the first manifest of an image index in an OCI layout."""

    def blob(digest: str) -> dict[str, object]:
        loaded: dict[str, object] = json.loads(
            (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_text()
        )
        return loaded

    index = blob(index_digest)
    manifests = index["manifests"]
    assert isinstance(manifests, list)
    manifest = blob(manifests[0]["digest"])
    config_ref = manifest["config"]
    assert isinstance(config_ref, dict)
    config = blob(config_ref["digest"])
    inner = config["config"]
    assert isinstance(inner, dict)
    labels: dict[str, str] = inner["Labels"]
    return labels


@pytest.mark.slow
def test_a_second_call_returns_the_cached_bundle_without_building(
    the_previous: previous.Previous, previous_bundle: Path
) -> None:
    before = previous_bundle.stat()
    started = time.monotonic()
    again = previous.bundle(previous.DEFAULT_PLATFORMS)
    seconds = time.monotonic() - started
    after = again.stat()
    assert again == previous_bundle
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert seconds < 1, f"the cached bundle took {seconds:.1f} s"
    record = json.loads((previous_bundle.parent / previous.BUILD_RECORD).read_text())
    assert record["commit"] == the_previous.commit and record["version"] == the_previous.version
    assert not list(previous.cache_dir().glob(f".{previous_bundle.parent.name}.*.tmp")), "a build's leftovers stayed"


def test_the_cache_is_under_the_images_cache_keyed_by_commit_and_platforms(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("METAX_IMAGES_CACHE", str(tmp_path / "images"))
    p = previous.Previous("0.1.0", "a" * 40, "v0.1.0")
    assert previous.cache_dir() == images_build.cache_root() / "previous" == tmp_path / "images" / "previous"
    assert previous.entry(p).name == f"{'a' * 40}-linux-amd64"
    both = previous.entry(p, ["linux/arm64", "linux/amd64"])
    assert both.name == f"{'a' * 40}-linux-amd64-linux-arm64" == previous.entry(p, publish.PLATFORMS).name
    # An entry that exists is complete (it appears by a rename): returned as it is, nothing built.
    cached = previous.entry(p) / bundle.name(p.version)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"a cached bundle")
    assert previous.bundle(previous=p) == cached
    with pytest.raises(ReleaseError, match="linux_amd64"):
        previous.entry(p, ["linux_amd64"])


def test_a_build_that_fails_names_the_commit_and_step_and_leaves_no_entry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The repository's first commit has no release code: its tree's own ``python -m metax_dev.release`` fails
    (and this clone's editable ``metax_dev`` does not stand in for the tree's)."""
    monkeypatch.setenv("METAX_IMAGES_CACHE", str(tmp_path / "images"))
    first = _git("rev-list", "--max-parents=0", "HEAD").split()[-1]
    lookup = ["git", "cat-file", "-e", f"{first}:metax_dev/release"]
    assert subprocess.run(lookup, cwd=previous.REPO, capture_output=True, check=False).returncode != 0
    p = previous.Previous("0.0.1", first, "v0.0.1")
    with pytest.raises(ReleaseError) as refused:
        previous.bundle(previous=p)
    said = str(refused.value)
    assert first in said and "metax_dev.release bundle" in said and "No module named metax_dev.release" in said
    assert [e.name for e in previous.cache_dir().iterdir()] == [previous.entry(p).name + ".lock"]


def test_a_commit_not_in_the_clone_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("METAX_IMAGES_CACHE", str(tmp_path / "images"))
    p = previous.Previous("0.1.0", "0" * 40, "v0.1.0")
    with pytest.raises(ReleaseError, match=f"commit {'0' * 40}.*the commit in this clone"):
        previous.bundle(previous=p)
    assert not previous.entry(p).exists()


def test_the_checked_in_file_is_well_formed() -> None:
    p = previous.load()
    assert p.tag == f"v{p.version}"
    assert _git("cat-file", "-t", p.commit).strip() == "commit"


GOOD = {"version": '"0.1.0"', "commit": f'"{"0123456789abcdef" * 2}{"01234567"}"', "tag": '"v0.1.0"'}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"commit": None}, "commit", "missing"),
        ({"version": None}, "version", "missing"),
        ({"tag": None}, "tag", "missing"),
        ({"commit": '"62351bd"'}, "commit", "full commit sha"),
        ({"commit": f'"{"g" * 40}"'}, "commit", "full commit sha"),
        ({"commit": f'"{"ABCDEF0123" * 4}"'}, "commit", "lowercase"),
        ({"commit": "62351"}, "commit", "must be a string"),
        ({"version": '"v0.1.0"'}, "version", "not a release version"),
        ({"tag": '"0.1.0"'}, "tag", "'v' \\+ version"),
        ({"comit": '"x"'}, "comit", "unknown field"),
    ],
)
def test_a_bad_previous_toml_is_refused_naming_the_field(
    tmp_path: Path, change: dict[str, str | None], field: str, words: str
) -> None:
    values = {**GOOD, **change}
    path = tmp_path / "previous.toml"
    path.write_text("".join(f"{k} = {v}\n" for k, v in values.items() if v is not None))
    with pytest.raises(ReleaseError, match=rf"previous\.toml: {field}: .*{words}"):
        previous.load(path)


def test_a_good_previous_toml_loads(tmp_path: Path) -> None:
    path = tmp_path / "previous.toml"
    path.write_text("".join(f"{k} = {v}\n" for k, v in GOOD.items()))
    assert previous.load(path) == previous.Previous("0.1.0", "0123456789abcdef" * 2 + "01234567", "v0.1.0")
