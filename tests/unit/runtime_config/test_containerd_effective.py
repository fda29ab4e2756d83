"""containerd's load order and, on 1.x, the effective CRI section our drop-in copies (C4, issue 37 items 1 and 3).

Aspects: the walk follows containerd's ``LoadConfig`` (breadth first, each file's imports in order, relative to
the importing file, Go's glob where ``*`` never crosses ``/`` and ``?`` alone is literal, the first occurrence
decides); on 1.x the drop-in carries the section of the *last* file that defines it (another vendor's, not the
root's), sits where no glob covers it and is the root's last import; a file loaded after ours that defines the
section is refused by name, as is an import that names no file; an explicit ``enable_cdi = false`` is kept.
The multi-file inputs here are the smallest shapes of each rule; tests/unit/runtime_config/test_corpus.py runs
the rules over the nodes of the real corpus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import tomlkit

from metax_core.errors import InvalidSpec
from metax_core.runtime import containerd, containerd_imports, detect, handler

ROOT = "/etc/containerd/config.toml"
CRI = "io.containerd.grpc.v1.cri"
V17 = detect.containerd_schema((1, 7, 27))
V16 = detect.containerd_schema((1, 6, 20))
V24 = detect.containerd_schema((2, 4, 2))

ROOT_17 = f"""version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."{CRI}"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."{CRI}".containerd]
    default_runtime_name = "runc"
    [plugins."{CRI}".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."{CRI}".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""

NVIDIA_17 = f"""version = 2

[plugins."{CRI}"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."{CRI}".containerd]
    default_runtime_name = "runc"
    [plugins."{CRI}".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."{CRI}".containerd.runtimes.runc.options]
        SystemdCgroup = true
    [plugins."{CRI}".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."{CRI}".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
        SystemdCgroup = true
"""


def _cri(text: str) -> dict[str, Any]:
    section = tomlkit.parse(text).unwrap()["plugins"][CRI]
    assert isinstance(section, dict)
    return section


def _configure(
    root: str | None, files: Mapping[str, str | None], globs: Mapping[str, tuple[str, ...]] | None = None, **kw: Any
) -> containerd.Configured:
    return containerd.configure(
        root, root_path=ROOT, schema=kw.pop("schema", V17), loaded=files, globs=globs or {}, **kw
    )


# -- the walk -----------------------------------------------------------------------------------------------------


def test_the_walk_is_breadth_first_in_each_files_order_and_relative_to_the_importer() -> None:
    texts = {
        ROOT: 'version = 2\nimports = ["a.toml", "/opt/b.toml"]\n',
        "/etc/containerd/a.toml": 'version = 2\nimports = ["sub/c.toml"]\n',
        "/opt/b.toml": 'version = 2\nimports = ["d.toml"]\n',
        "/etc/containerd/sub/c.toml": "version = 2\n",
        "/opt/d.toml": "version = 2\n",
    }
    walked = containerd_imports.walk(ROOT, texts, {})
    assert walked.order == (
        ROOT,
        "/etc/containerd/a.toml",
        "/opt/b.toml",
        "/etc/containerd/sub/c.toml",
        "/opt/d.toml",
    )
    assert walked.complete


def test_the_walk_asks_for_what_it_has_not_read_and_takes_the_first_occurrence() -> None:
    texts = {ROOT: 'version = 2\nimports = ["conf.d/*.toml", "conf.d/b.toml", "x.toml"]\n'}
    walked = containerd_imports.walk(ROOT, texts, {})
    assert walked.wanted_globs == ("/etc/containerd/conf.d/*.toml",)
    assert walked.wanted_files == ("/etc/containerd/conf.d/b.toml", "/etc/containerd/x.toml")
    texts |= {"/etc/containerd/conf.d/a.toml": "", "/etc/containerd/conf.d/b.toml": "", "/etc/containerd/x.toml": None}
    globs = {"/etc/containerd/conf.d/*.toml": ("/etc/containerd/conf.d/b.toml", "/etc/containerd/conf.d/a.toml")}
    walked = containerd_imports.walk(ROOT, texts, globs)
    assert walked.order == (ROOT, "/etc/containerd/conf.d/a.toml", "/etc/containerd/conf.d/b.toml")
    assert walked.missing == ("/etc/containerd/x.toml",)


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("/etc/containerd/*.toml", "/etc/containerd/a.toml", True),
        ("/etc/containerd/*.toml", "/etc/containerd/conf.d/99-metax.toml", False),  # fnmatch's * would cross /
        ("/etc/containerd/*/*.toml", "/etc/containerd/conf.d/99-metax.toml", True),
        ("/etc/containerd/conf.d/*.toml", "/etc/containerd/conf.d/.hidden.toml", True),  # Go does not skip dotfiles
        ("/etc/containerd/conf.d/[^a]*.toml", "/etc/containerd/conf.d/a1.toml", False),
        ("/etc/containerd/conf.d/[^a]*.toml", "/etc/containerd/conf.d/b1.toml", True),
    ],
)
def test_globs_match_as_go_filepath_match(pattern: str, path: str, matches: bool) -> None:
    assert containerd_imports.glob_match(pattern, path) is matches


def test_only_a_star_makes_an_import_a_glob() -> None:
    assert containerd_imports.is_glob("/etc/containerd/conf.d/*.toml")
    assert not containerd_imports.is_glob("/etc/containerd/conf.d/[ab].toml")


# -- 1.x: the effective section ------------------------------------------------------------------------------------


def test_a_node_configured_by_another_vendor_after_us_keeps_their_runtimes_and_gets_ours_last() -> None:
    """NVIDIA's toolkit in drop-in mode: the root imports conf.d/*.toml and conf.d/99-nvidia.toml has the section.
    Before: our drop-in in conf.d sorted before 99-nvidia.toml, whose section replaced ours (metax never loaded)."""
    nvidia = "/etc/containerd/conf.d/99-nvidia.toml"
    done = _configure(ROOT_17, {nvidia: NVIDIA_17}, {"/etc/containerd/conf.d/*.toml": (nvidia,)})
    assert done.dropin == "/etc/containerd/metax/99-metax.toml"
    imports = tomlkit.parse(done.root_text)["imports"]
    assert list(imports) == ["/etc/containerd/conf.d/*.toml", done.dropin]  # ours last, theirs kept
    runtimes = _cri(done.dropin_text)["containerd"]["runtimes"]
    assert set(runtimes) == {"runc", "nvidia", handler.RUNTIME_HANDLER}
    assert runtimes["nvidia"] == _cri(NVIDIA_17)["containerd"]["runtimes"]["nvidia"]
    assert done.copies == (ROOT, nvidia)
    assert done.loaded == (ROOT, nvidia, done.dropin)


def test_a_vendor_section_imported_before_ours_is_what_the_dropin_copies() -> None:
    """EKS AL2: the root imports config.d/*.toml; the vendor file's section is in effect, not the root's. Before,
    the drop-in copied the root's and the vendor's runtimes were gone after the restart."""
    vendor = "/etc/containerd/config.d/10-vendor.toml"
    root = ROOT_17.replace("conf.d/*.toml", "config.d/*.toml")
    done = _configure(root, {vendor: NVIDIA_17}, {"/etc/containerd/config.d/*.toml": (vendor,)})
    assert set(_cri(done.dropin_text)["containerd"]["runtimes"]) == {"runc", "nvidia", handler.RUNTIME_HANDLER}
    assert _cri(done.dropin_text)["sandbox_image"] == "registry.k8s.io/pause:3.9"


def test_a_file_loaded_after_ours_that_defines_the_section_is_refused_by_name() -> None:
    vendor, later = "/etc/containerd/config.d/10-vendor.toml", "/opt/vendor/late.toml"
    root = ROOT_17.replace("conf.d/*.toml", "config.d/*.toml")
    vendor_text = f'version = 2\nimports = ["{later}"]\n'
    with pytest.raises(InvalidSpec) as caught:
        _configure(root, {vendor: vendor_text, later: NVIDIA_17}, {"/etc/containerd/config.d/*.toml": (vendor,)})
    message = str(caught.value)
    assert later in message and "loaded after /etc/containerd/metax/99-metax.toml" in message


def test_our_import_goes_back_to_the_end_when_someone_appends_after_it() -> None:
    done = _configure(ROOT_17, {})
    appended = tomlkit.parse(done.root_text)
    appended["imports"].append("/etc/containerd/site.toml")
    again = _configure(tomlkit.dumps(appended), {"/etc/containerd/site.toml": NVIDIA_17})
    assert list(tomlkit.parse(again.root_text)["imports"])[-1] == done.dropin
    assert again.edits == ()  # the entry is ours already: moved, not added
    assert "nvidia" in _cri(again.dropin_text)["containerd"]["runtimes"]


def test_an_import_that_names_no_file_is_refused_on_1x() -> None:
    root = 'version = 2\nimports = ["/etc/containerd/gone.toml"]\n'
    with pytest.raises(InvalidSpec, match="gone.toml, which does not exist"):
        _configure(root, {"/etc/containerd/gone.toml": None})


def test_without_any_section_the_dropin_keeps_the_default_runc() -> None:
    done = _configure("version = 2\n", {}, schema=V16)
    runtimes = _cri(done.dropin_text)["containerd"]["runtimes"]
    assert runtimes["runc"] == dict(containerd.DEFAULT_RUNC_1X)
    assert "enable_cdi" not in _cri(done.dropin_text)  # 1.6 has no CDI


def test_configuring_its_own_output_changes_nothing() -> None:
    nvidia = "/etc/containerd/conf.d/99-nvidia.toml"
    files, globs = {nvidia: NVIDIA_17}, {"/etc/containerd/conf.d/*.toml": (nvidia,)}
    once = _configure(ROOT_17, files, globs)
    twice = _configure(once.root_text, {**files, once.dropin: once.dropin_text}, globs)
    assert (twice.root_text, twice.dropin_text, twice.edits) == (once.root_text, once.dropin_text, ())


def test_the_other_majors_dropin_is_dropped_from_the_imports() -> None:
    """containerd moved from 2.x back to 1.x (or an agent of before this change): its conf.d drop-in goes."""
    old = "/etc/containerd/conf.d/99-metax.toml"
    done = _configure(f'version = 2\nimports = ["{old}"]\n', {old: "version = 2\n"})
    assert list(tomlkit.parse(done.root_text)["imports"]) == [done.dropin]


# -- 1.7: CDI ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "wanted", "off"), [("", True, False), ("false", False, True), ("true", True, False)]
)
def test_enable_cdi_set_by_a_file_is_kept_and_only_an_absent_one_is_turned_on(
    setting: str, wanted: bool, off: bool
) -> None:
    root = ROOT_17.replace('imports = ["/etc/containerd/conf.d/*.toml"]\n', "")
    if setting:
        root = root.replace('  sandbox_image = "registry.k8s.io/pause:3.9"\n', f"  enable_cdi = {setting}\n")
    done = _configure(root, {})
    assert _cri(done.dropin_text)["enable_cdi"] is wanted
    assert (done.cdi_off == ROOT) is off
    assert done.cdi_added is (not setting)


def test_a_vendor_files_enable_cdi_false_is_the_one_kept() -> None:
    vendor = "/etc/containerd/config.d/10-eks.toml"
    root = ROOT_17.replace("conf.d/*.toml", "config.d/*.toml")
    eks = NVIDIA_17.replace(f'[plugins."{CRI}"]\n', f'[plugins."{CRI}"]\n  enable_cdi = false\n', 1)
    done = _configure(root, {vendor: eks}, {"/etc/containerd/config.d/*.toml": (vendor,)})
    assert _cri(done.dropin_text)["enable_cdi"] is False and done.cdi_off == vendor


# -- 2.x: deep merge -----------------------------------------------------------------------------------------------


def test_2x_copies_the_default_runtime_as_the_merged_files_define_it() -> None:
    """2.x deep-merges imports: a vendor drop-in that makes its runtime the default is seen by the handler copy."""
    plugin = "io.containerd.cri.v1.runtime"
    root = 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    vendor = "/etc/containerd/conf.d/50-vendor.toml"
    vendor_text = (
        f'version = 3\n[plugins."{plugin}".containerd]\n  default_runtime_name = "kata"\n'
        f'[plugins."{plugin}".containerd.runtimes.kata]\n  runtime_type = "io.containerd.kata.v2"\n'
    )
    done = _configure(root, {vendor: vendor_text}, {"/etc/containerd/conf.d/*.toml": (vendor,)}, schema=V24)
    assert done.dropin == "/etc/containerd/conf.d/99-metax.toml" and done.edits == ()
    metax = tomlkit.parse(done.dropin_text).unwrap()["plugins"][plugin]["containerd"]["runtimes"]["metax"]
    assert metax["runtime_type"] == "io.containerd.kata.v2"
