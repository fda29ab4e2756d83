"""Every configured corpus file loads in the real containerd of its version (``containerd config dump``), and the
effective configuration differs from the original's only by our handler (and ``imports``, and on 1.7
``enable_cdi``). Real binaries here: Debian's 1.6.20 and the real node's 2.4.2; the 1.7, 2.0 and 2.2 files are
checked by the pure round trip only (tests/unit/runtime_config), no such binary runs here."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest
import tomlkit

from metax_core.runtime import containerd, detect, handler
from tests.unit.runtime_config import corpus

from .conftest import DEBIAN_CONTAINERD, harness_bin


def _binary(version: detect.Version) -> pathlib.Path | None:
    if version[:2] == (1, 6):
        return DEBIAN_CONTAINERD
    if version[:2] == (2, 4):
        return harness_bin() / "containerd"
    return None


LOADABLE = [p for p in corpus.files() if _binary(corpus.version_of(p)) is not None]


def _dump(binary: pathlib.Path, root: pathlib.Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(binary), "--config", str(root), "config", "dump"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return tomlkit.parse(done.stdout).unwrap()


def _without_ours(doc: dict[str, Any], plugin: str) -> dict[str, Any]:
    doc.pop("imports", None)
    cri = doc.get("plugins", {}).get(plugin, {})
    cri.get("containerd", {}).get("runtimes", {}).pop(handler.RUNTIME_HANDLER, None)
    return doc


def test_the_corpus_has_files_for_both_real_binaries() -> None:
    assert {corpus.version_of(p)[:2] for p in LOADABLE} == {(1, 6), (2, 4)}


@pytest.mark.parametrize("path", LOADABLE, ids=lambda p: p.name)
def test_configured_corpus_file_loads_with_only_our_handler_added(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    version = corpus.version_of(path)
    binary = _binary(version)
    assert binary is not None and binary.is_file(), f"no containerd {version} here"
    schema = detect.containerd_schema(version)
    root = tmp_path / "etc" / "containerd" / "config.toml"
    root.parent.mkdir(parents=True)
    # the files the corpus' imports name (containerd 2.4.2 silently ignores the imports after a missing one)
    (root.parent / "extra.toml").write_text(f"version = {schema.file_version}\n")
    text = path.read_text().replace("/etc/containerd/conf.d/99-nvidia.toml", str(root.parent / "99-nvidia.toml"))
    (root.parent / "99-nvidia.toml").write_text(f"version = {schema.file_version}\n")
    root.write_text(text)
    original = _dump(binary, root)

    done = containerd.configure(root.read_text(), root_path=str(root), schema=schema)
    root.write_text(done.root_text)
    dropin = pathlib.Path(done.dropin)
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(done.dropin_text)
    dumped = subprocess.run(
        [str(binary), "--config", str(root), "config", "dump"], capture_output=True, text=True, timeout=60, check=False
    )
    assert dumped.returncode == 0, dumped.stderr
    assert containerd.dumped_handler(dumped.stdout, handler.WRAPPER_HOST_PATH) == (
        True,
        "the configuration declares runtime handler 'metax'",
    )
    plugin = "io.containerd.grpc.v1.cri" if version[0] == 1 else "io.containerd.cri.v1.runtime"
    after = tomlkit.parse(dumped.stdout).unwrap()
    assert _without_ours(after, plugin) == _without_ours(original, plugin)
