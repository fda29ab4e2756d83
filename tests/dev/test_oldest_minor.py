"""The oldest-minor build and the chart's lower bound say the same thing (R-COMPAT).

Aspects: the Kubernetes version ``metax_dev/controlplane/gomod-oldest`` builds is of the minor Chart.yaml's
``kubeVersion`` names; every ``k8s.io`` staging module there is pinned to that release; the oldest minor's
kube-apiserver is not given a flag it lacks, the current one still is; ``gomod-oldest`` holds only go.mod, go.sum
and the three mains (no upstream or generated code: the build makes the OpenAPI definitions, ``oldest_source``),
the generator's input is the tagged packages minus test and example ones, of the staging modules the build
compiles, and the module copy in the cache has writable directories for the generated file.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from metax_dev.controlplane import build, components, oldest_source, targets

ROOT = Path(__file__).resolve().parents[2]


def _lower_bound() -> str:
    constraint = yaml.safe_load((ROOT / "charts" / "metax-operator" / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=(\d+\.\d+)\.0-0", constraint)
    assert match, constraint
    return match.group(1)


def test_the_oldest_build_is_the_charts_lower_bound() -> None:
    version = build.oldest_versions()["kubernetes"]
    assert version.lstrip("v").rsplit(".", 1)[0] == _lower_bound()


def test_every_staging_module_is_pinned_to_the_same_release() -> None:
    version = build.oldest_versions()["kubernetes"]
    staging = "v0." + version.lstrip("v").split(".", 1)[1]
    pins = re.findall(
        r"^\s*k8s\.io/(\S+) => k8s\.io/\1 (\S+)$", (targets.oldest_module_dir() / "go.mod").read_text(), re.M
    )
    assert len(pins) > 20
    assert {v for _, v in pins} == {staging}


def test_an_older_apiserver_gets_no_flag_it_lacks(tmp_path: Path) -> None:
    credentials = components.write_credentials(tmp_path, "https://127.0.0.1:1")
    ports = dict.fromkeys(components.PORTS, 1)
    old = components.Config(tmp_path, ports, credentials, 1, 23).apiserver_args()
    new = components.Config(tmp_path, ports, credentials, 1, 36).apiserver_args()
    flag = "--shutdown-watch-termination-grace-period=2s"
    assert flag not in old and flag in new
    assert set(old) == set(new) - {flag}


def test_the_repository_carries_no_upstream_or_generated_go() -> None:
    module = targets.oldest_module_dir()
    files = sorted(str(p.relative_to(module)) for p in module.rglob("*") if p.is_file())
    mains = [f"cmd/{name}/main.go" for name in targets.OLDEST]
    assert files == [*mains, "go.mod", "go.sum"]
    assert all(len(p.read_bytes()) < 2000 for p in module.rglob("*.go"))
    assert f"tool {oldest_source.OPENAPI_GEN}" in (module / "go.mod").read_text()


def test_the_generator_is_given_the_tagged_packages_minus_tests_and_examples(tmp_path: Path) -> None:
    def package(root: Path, relative: str, files: dict[str, str]) -> None:
        (root / relative).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / relative / name).write_text(text)

    tagged = "// +k8s:openapi-gen=true\npackage x\n"
    api, machinery = tmp_path / "api", tmp_path / "apimachinery"
    package(api, "core/v1", {"doc.go": tagged, "types.go": "package v1\n"})
    package(api, "untagged/v1", {"types.go": "package v1\n"})
    package(api, "onlytest/v1", {"x_test.go": tagged, "types.go": "package v1\n"})
    package(api, "vendor/k8s.io/y", {"doc.go": tagged})
    package(machinery, "pkg/apis/meta/v1", {"doc.go": tagged})
    package(machinery, "pkg/apis/testapigroup/v1", {"doc.go": tagged})
    package(machinery, "pkg/apis/example2/v1", {"doc.go": tagged})
    found = oldest_source.openapi_packages({"k8s.io/api": api, "k8s.io/apimachinery": machinery})
    assert found == ["k8s.io/api/core/v1", "k8s.io/apimachinery/pkg/apis/meta/v1"]


def test_the_staging_modules_are_the_pinned_ones_the_build_compiles() -> None:
    module = targets.oldest_module_dir()
    staging = oldest_source.staging_modules(module)
    assert {"k8s.io/api", "k8s.io/apimachinery", "k8s.io/apiserver", "k8s.io/kube-aggregator"} <= set(staging)
    assert "k8s.io/sample-controller" not in staging  # pinned, but no package of it is built
    assert set(staging.values()) == {"v0." + build.oldest_versions()["kubernetes"].lstrip("v").split(".", 1)[1]}


def test_the_source_tree_links_the_module_into_writable_directories(tmp_path: Path) -> None:
    source = tmp_path / "mod"
    (source / "pkg" / "generated" / "openapi").mkdir(parents=True)
    (source / "pkg" / "generated" / "openapi" / "doc.go").write_text("package openapi\n")
    (source / "go.mod").write_text("module k8s.io/kubernetes\n")
    for path in [*source.rglob("*"), source]:
        path.chmod(0o555 if path.is_dir() else 0o444)  # as in the Go module cache
    try:
        target = tmp_path / "copy"
        oldest_source._link_tree(source, target)
        assert (target / "go.mod").read_text() == "module k8s.io/kubernetes\n"
        (target / "pkg" / "generated" / "openapi" / "zz_generated.openapi.go").write_text("package openapi\n")
    finally:
        for path in [source, *source.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
