"""The pure round trip over the corpus of real nodes' configurations (tests/data/runtime_corpus; C4, R-INSTALL;
issue 37 item 6): for every containerd, Docker and CRI-O case, configure → configure again changes nothing →
the record gives the original back byte for byte; the root file keeps every line (only ``imports`` changes);
on containerd 1.x the drop-in carries every runtime of the section in effect and the default runtime's cgroup
driver; a file that is not a configuration (an unrendered template) is refused naming the file.
tests/containerruntime/test_corpus_rounds.py runs the agent's rounds on the same cases with the real daemons."""

from __future__ import annotations

from typing import Any

import pytest
import tomlkit

from metax_core.errors import InvalidSpec
from metax_core.runtime import containerd, containerd_imports, crio, detect, docker, handler, record
from tests.support import runtime_corpus

CONTAINERD = runtime_corpus.cases("containerd")
DOCKER = runtime_corpus.cases("docker")
CRIO = runtime_corpus.cases("crio")
WRAPPER = handler.WRAPPER_HOST_PATH


def test_the_corpus_is_what_issue_37_asks_for() -> None:
    every = runtime_corpus.cases()
    assert sum(len(c.files) for c in every) >= 30
    assert {f.repo for c in every for f in c.files} >= {
        "awslabs/amazon-eks-ami",
        "NVIDIA/nvidia-container-toolkit",
        "kubernetes-sigs/kind",
        "kubernetes-sigs/kubespray",
        "siderolabs/talos",
        "k0sproject/k0s",
        "flatcar/scripts",
        "Azure/AgentBaker",
        "bottlerocket-os/bottlerocket",
        "k3s-io/k3s",
    }
    configures = [c for c in CONTAINERD if not c.refused]
    assert any(c.version[0] == 1 and "nvidia" in c.name and len(c.files) > 1 for c in configures)
    assert any(c.version[0] == 2 and "nvidia" in c.name and len(c.files) > 1 for c in configures)
    assert any(f.mode == 0o600 for c in configures for f in c.files)
    assert any("enable_cdi = false" in (c.text(c.root) or "") for c in configures if c.version[:2] == (1, 7))
    assert sum('imports = ["' in (c.text(c.root) or "") and "*" in (c.text(c.root) or "") for c in configures) >= 2
    assert all(f.commit and len(f.commit) == 40 for c in every for f in c.files)


def _configure(case: runtime_corpus.Case, root_text: str | None = None, **extra: Any) -> containerd.Configured:
    loaded, globs = runtime_corpus.gathered(case, root_text)
    return containerd.configure(
        root_text if root_text is not None else case.text(case.root),
        root_path=case.root,
        schema=detect.containerd_schema(case.version),
        wrapper=WRAPPER,
        loaded={**loaded, **extra},
        globs=globs,
    )


@pytest.mark.parametrize("case", [c for c in CONTAINERD if c.refused], ids=lambda c: c.id)
def test_a_template_left_unrendered_is_refused_naming_the_file(case: runtime_corpus.Case) -> None:
    with pytest.raises(InvalidSpec) as caught:
        _configure(case)
    assert f"{case.root}: is not valid TOML" in str(caught.value)


CONFIGURES = [c for c in CONTAINERD if not c.refused]


@pytest.mark.parametrize("case", CONFIGURES, ids=lambda c: c.id)
def test_configure_again_changes_nothing_and_the_record_gives_the_original_back(case: runtime_corpus.Case) -> None:
    original = case.text(case.root)
    once = _configure(case)
    twice = _configure(case, once.root_text, **{once.dropin: once.dropin_text})
    assert (twice.root_text, twice.dropin_text, twice.edits) == (once.root_text, once.dropin_text, ())
    entry = record.remember(None, case.root, original, once.root_text, once.edits, owned=False)
    assert record.undo_text(entry, once.root_text, lambda t: t) == original
    if original is not None:  # reversed structurally (someone changed it since): the same lines
        reversed_ = containerd.unconfigure(once.root_text, entry.edits, case.root)
        assert [line for line in reversed_.splitlines() if line.strip()] == [
            line for line in original.splitlines() if line.strip()
        ]


@pytest.mark.parametrize("case", CONFIGURES, ids=lambda c: c.id)
def test_the_root_keeps_every_line_and_only_imports_changes(case: runtime_corpus.Case) -> None:
    original = case.text(case.root) or ""
    done = _configure(case)
    before, after = tomlkit.parse(original).unwrap(), tomlkit.parse(done.root_text).unwrap()
    before.pop("imports", None)
    imports = after.pop("imports", [])
    assert after == before
    assert done.dropin in imports or containerd.covered(imports, done.dropin, case.root)
    kept = [line for line in original.splitlines() if not line.startswith("imports")]
    assert all(line in done.root_text.splitlines() for line in kept)


def _runtimes(section: Any) -> dict[str, Any]:
    return dict(containerd_imports.get(section or {}, "containerd", "runtimes") or {})


@pytest.mark.parametrize("case", CONFIGURES, ids=lambda c: c.id)
def test_the_dropin_carries_the_section_in_effect_and_the_default_runtimes_cgroup_driver(
    case: runtime_corpus.Case,
) -> None:
    schema = detect.containerd_schema(case.version)
    done = _configure(case)
    dropin = tomlkit.parse(done.dropin_text).unwrap()
    plugin = detect.cri_runtime_plugin(done.file_version)
    section = dropin["plugins"][plugin]
    metax = section["containerd"]["runtimes"][handler.RUNTIME_HANDLER]
    assert metax["options"]["BinaryName"] == WRAPPER
    loaded, globs = runtime_corpus.gathered(case)
    walked = containerd_imports.walk(case.root, {**loaded, case.root: case.text(case.root)}, globs)
    if schema.replaces_sections:
        effective = containerd_imports.effective_section(walked, plugin).body
        assert set(_runtimes(effective)) <= set(section["containerd"]["runtimes"])
        default = (containerd_imports.get(effective or {}, "containerd", "default_runtime_name")) or "runc"
        base = _runtimes(effective).get(default, {})
    else:
        assert set(section) == {"containerd"} and set(section["containerd"]["runtimes"]) == {"metax"}
        base = {}
        for name in (detect.cri_runtime_plugin(2), detect.cri_runtime_plugin(3)):
            for path in walked.order:
                runtimes = _runtimes(containerd_imports.get(walked.docs[path], "plugins", name))
                default = containerd_imports.get(
                    walked.docs[path], "plugins", name, "containerd", "default_runtime_name"
                )
                base = runtimes.get(str(default or "runc"), base)
    cgroup = containerd_imports.get(base, "options", "SystemdCgroup")
    if cgroup is not None:
        assert metax["options"]["SystemdCgroup"] == cgroup


@pytest.mark.parametrize("case", [c for c in CONFIGURES if c.version[:2] == (1, 7)], ids=lambda c: c.id)
def test_on_17_the_section_in_effects_enable_cdi_is_kept(case: runtime_corpus.Case) -> None:
    done = _configure(case)
    section = tomlkit.parse(done.dropin_text).unwrap()["plugins"][detect.cri_runtime_plugin(2)]
    loaded, globs = runtime_corpus.gathered(case)
    walked = containerd_imports.walk(case.root, {**loaded, case.root: case.text(case.root)}, globs)
    effective = containerd_imports.effective_section(walked, detect.cri_runtime_plugin(2)).body or {}
    assert section["enable_cdi"] == effective.get("enable_cdi", True)
    assert (done.cdi_off is not None) is (effective.get("enable_cdi") is False)


@pytest.mark.parametrize("case", DOCKER, ids=lambda c: c.id)
def test_docker_cases_round_trip_and_keep_every_key(case: runtime_corpus.Case) -> None:
    original = case.text(case.root)
    assert original is not None
    done = docker.configure(original, version=case.version, wrapper=WRAPPER, path=case.root)
    again = docker.configure(done.text, version=case.version, wrapper=WRAPPER, path=case.root)
    assert again.edits == () and again.text == done.text
    entry = record.remember(None, case.root, original, done.text, done.edits, owned=False)
    assert record.undo_text(entry, done.text, lambda t: t) == original
    import json

    before, after = json.loads(original), json.loads(done.text)
    assert after["runtimes"][handler.RUNTIME_HANDLER] == {"path": WRAPPER}
    assert after.get("default-runtime") == before.get("default-runtime")  # nvidia's default stays theirs
    assert {k: v for k, v in after.items() if k not in ("runtimes", "features")} == {
        k: v for k, v in before.items() if k not in ("runtimes", "features")
    }
    assert json.loads(docker.unconfigure(done.text, done.edits, case.root)) == before


@pytest.mark.parametrize("case", CRIO, ids=lambda c: c.id)
def test_crio_cases_leave_every_file_of_theirs_and_none_hides_our_handler(case: runtime_corpus.Case) -> None:
    """CRI-O reads crio.conf, then crio.conf.d in lexical order, a later file's option winning, runtimes merged by
    name: NVIDIA's 99-nvidia.toml sorts after our 99-metax.conf, and loses nothing of ours as long as it names no
    ``metax`` (what the real ``crio config`` dry run checks, tests/containerruntime/test_crio.py)."""
    ours = crio.dropin_path(crio.DROPIN_DIR)
    assert ours not in [f.path for f in case.files]
    assert crio.check_version(case.version) is None
    for f in case.files:
        text = case.text(f.path)
        assert text is not None
        assert crio.handler_entry(crio.parse(text, f.path)) is None, f.path
    assert crio.handler_loaded(crio.parse(crio.dropin(WRAPPER), ours), WRAPPER)[0]
