"""The build (issue 21, Build 2; docs/images.md): cached, reproducible, and naming exactly what the chart and the
operator reference.

- a rebuild with no source change reuses the archives in seconds;
- building the project layer again from the same tree gives the same manifest digests (fixed timestamps,
  unchecked-hash bytecode, sorted files): the build is reproducible;
- a source change rebuilds only the top layer: the base and dependency layers keep their digests;
- the archives are named ``<registry>/<name>:<version>`` = the chart's operator image and every image the
  operator renders for a workload that has a program (the others are listed as pending in images.toml).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from metax_core import components
from metax_core.cluster import render_settings, workloads
from metax_core.spec import model as spec
from metax_dev.images import build, definitions
from tests.images.conftest import read_archive

CHART = definitions.REPO / "charts" / "metax-operator"


def test_a_rebuild_with_no_change_takes_seconds(built: build.Built) -> None:
    again = build.build()
    assert again.cached
    assert again.digests == built.digests
    assert again.seconds < 10, f"{again.seconds:.1f} s"


@pytest.mark.slow
def test_the_build_is_reproducible_and_a_source_change_rebuilds_only_the_top_layer(
    built: build.Built, tmp_path: Path
) -> None:
    twice = build.build(tmp_path / "twice", force_app=True)
    assert not twice.cached
    assert twice.digests == built.digests

    # A copy of the tree as one commit, then a change to one source file.
    repo = tmp_path / "repo"
    for f in build.source_files():
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(definitions.REPO / f, repo / f)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], check=True)
    with (repo / "metax_core" / "versions.py").open("a") as f:
        f.write("\n# a change\n")
    changed = build.build(tmp_path / "changed", repo=repo)
    before = [layer["digest"] for layer in read_archive(built.archives["metax-operator"])[1]["layers"]]
    after = [layer["digest"] for layer in read_archive(changed.archives["metax-operator"])[1]["layers"]]
    assert before[:-1] == after[:-1], "the base or dependency layer was rebuilt"
    assert before[-1] != after[-1]


def _chart_operator_image(registry: str) -> str:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    # templates/_helpers.tpl "metax-operator.image": <registry>/metax-operator, tag = appVersion.
    repo = f"{registry}/metax-operator" if registry else "metax-operator"
    return f"{repo}:{meta['appVersion']}"


def test_the_chart_and_the_operator_reference_exactly_the_built_images(
    built: build.Built, defs: definitions.Definitions
) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    registry = values["registry"]
    s = spec.ClusterOperatorSpec(registry=registry)
    rendered = {
        w.name: workloads.image(s, w, render_settings.RenderSettings())
        for info in components.CATALOGUE
        for w in info.workloads
    }
    references = dict(built.references)
    assert references.pop("metax-operator") == _chart_operator_image(registry)
    assert set(references) | set(defs.pending) == set(rendered), "a rendered workload has neither image nor pending"
    assert not set(references) & set(defs.pending)
    for name, reference in references.items():
        assert reference == rendered[name]
    # Each archive carries its reference, fully qualified as the kubelet's containerd resolves it: what
    # `ctr images import` (containerd 2) and `podman load` name the image.
    for name, archive in built.archives.items():
        index = read_archive(archive)[0]
        ref_name = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        assert ref_name == build.qualified(built.references[name])
    assert build.qualified("metax-driver:0.1.0") == "docker.io/library/metax-driver:0.1.0"
    assert build.qualified("r.example/metax/metax-driver:0.1.0") == "r.example/metax/metax-driver:0.1.0"
    assert build.qualified("metax/metax-driver:0.1.0") == "docker.io/metax/metax-driver:0.1.0"
