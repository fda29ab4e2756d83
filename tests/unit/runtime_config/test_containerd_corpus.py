"""configure → unconfigure over the corpus (C4, R-INSTALL): byte-identical back, idempotent, comments kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomlkit

from metax_core.runtime import containerd, detect, handler, record

from . import corpus


@pytest.mark.parametrize("path", corpus.files(), ids=lambda p: p.name)
def test_configure_then_unconfigure_is_byte_identical(path: Path) -> None:
    original = path.read_text()
    schema = detect.containerd_schema(corpus.version_of(path))
    done = containerd.configure(original, root_path=corpus.ROOT_PATH, schema=schema)
    entry = record.remember(None, corpus.ROOT_PATH, original, done.root_text, done.edits, owned=False)
    assert record.undo_text(entry, done.root_text, lambda t: t) == original
    # Structural reversal (the path taken when someone changed the file after us): the same lines, at most
    # a blank line that tomlkit left where our key was.
    reversed_ = containerd.unconfigure(done.root_text, done.edits, corpus.ROOT_PATH)
    assert [line for line in reversed_.splitlines() if line.strip()] == [
        line for line in original.splitlines() if line.strip()
    ]


@pytest.mark.parametrize("path", corpus.files(), ids=lambda p: p.name)
def test_configure_twice_changes_nothing(path: Path) -> None:
    schema = detect.containerd_schema(corpus.version_of(path))
    once = containerd.configure(path.read_text(), root_path=corpus.ROOT_PATH, schema=schema)
    twice = containerd.configure(once.root_text, root_path=corpus.ROOT_PATH, schema=schema)
    assert twice.edits == () and twice.root_text == once.root_text and twice.dropin_text == once.dropin_text


@pytest.mark.parametrize("path", corpus.files(), ids=lambda p: p.name)
def test_the_root_keeps_every_line_and_gains_at_most_our_import(path: Path) -> None:
    original = path.read_text()
    schema = detect.containerd_schema(corpus.version_of(path))
    done = containerd.configure(original, root_path=corpus.ROOT_PATH, schema=schema)
    before, after = original.splitlines(), done.root_text.splitlines()
    removed = [line for line in before if line not in after]
    added = [line for line in after if line not in before]
    imports_lines = [line for line in before if line.startswith("imports")]
    assert removed == (imports_lines if done.edits else [])
    assert all(line.startswith("imports") and done.dropin in line for line in added)
    covered = "conf.d/*.toml" in original
    assert (done.edits == ()) is covered


@pytest.mark.parametrize("path", corpus.files(), ids=lambda p: p.name)
def test_the_dropin_declares_the_handler_at_the_roots_version(path: Path) -> None:
    schema = detect.containerd_schema(corpus.version_of(path))
    done = containerd.configure(path.read_text(), root_path=corpus.ROOT_PATH, schema=schema)
    doc = tomlkit.parse(done.dropin_text).unwrap()
    root_version = tomlkit.parse(path.read_text()).get("version")
    assert doc["version"] == root_version == done.file_version
    cri = doc["plugins"][detect.cri_runtime_plugin(done.file_version)]
    metax = cri["containerd"]["runtimes"][handler.RUNTIME_HANDLER]
    assert metax["options"]["BinaryName"] == handler.WRAPPER_HOST_PATH
    if done.file_version == 2:  # 1.x replaces the whole section: every runtime of the root is carried
        root_cri = tomlkit.parse(path.read_text()).unwrap().get("plugins", {}).get("io.containerd.grpc.v1.cri", {})
        for name in root_cri.get("containerd", {}).get("runtimes", {}):
            assert name in cri["containerd"]["runtimes"]
        # 1.7: CDI turned on unless the root sets enable_cdi itself (an explicit false is kept, issue 37 item 3)
        set_by_root = root_cri.get("enable_cdi")
        wanted = set_by_root if set_by_root is not None else schema.cdi is detect.Cdi.OFF_BY_DEFAULT or None
        assert cri.get("enable_cdi") == wanted
    else:
        assert set(cri) == {"containerd"}


def test_the_handler_copies_the_default_runtimes_cgroup_driver() -> None:
    text = (corpus.DATA / "1.6.20-nvidia.toml").read_text()
    done = containerd.configure(text, root_path=corpus.ROOT_PATH, schema=detect.containerd_schema((1, 6, 20)))
    runtimes = tomlkit.parse(done.dropin_text).unwrap()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]
    assert runtimes["metax"]["options"] == {"BinaryName": handler.WRAPPER_HOST_PATH, "SystemdCgroup": True}
    assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"


def test_an_absent_root_file_is_created_and_removed_again() -> None:
    schema = detect.containerd_schema((2, 4, 2))
    done = containerd.configure(None, root_path=corpus.ROOT_PATH, schema=schema)
    assert tomlkit.parse(done.root_text).unwrap() == {
        "version": 4,
        "imports": [done.dropin],
    }
    entry = record.remember(None, corpus.ROOT_PATH, None, done.root_text, done.edits, owned=False)
    assert record.undo_text(entry, done.root_text, lambda t: t) is None


def test_an_administrators_edit_made_meanwhile_survives_the_undo() -> None:
    original = (corpus.DATA / "1.6.20-debian.toml").read_text()
    schema = detect.containerd_schema((1, 6, 20))
    done = containerd.configure(original, root_path=corpus.ROOT_PATH, schema=schema)
    entry = record.remember(None, corpus.ROOT_PATH, original, done.root_text, done.edits, owned=False)
    edited = done.root_text.replace('conf_dir = "/etc/cni/net.d"', 'conf_dir = "/etc/cni/site.d"')
    undone = record.undo_text(entry, edited, lambda t: containerd.unconfigure(t, entry.edits, corpus.ROOT_PATH))
    assert undone == original.replace('conf_dir = "/etc/cni/net.d"', 'conf_dir = "/etc/cni/site.d"')


def test_a_rerender_that_dropped_our_import_is_repaired_and_the_record_follows() -> None:
    original = (corpus.DATA / "2.4.2-minimal.toml").read_text()
    schema = detect.containerd_schema((2, 4, 2))
    done = containerd.configure(original, root_path=corpus.ROOT_PATH, schema=schema)
    entry = record.remember(None, corpus.ROOT_PATH, original, done.root_text, done.edits, owned=False)
    rerendered = "version = 4\n# rendered by config management\n"
    again = containerd.configure(rerendered, root_path=corpus.ROOT_PATH, schema=schema)
    assert again.edits == done.edits
    entry = record.remember(entry, corpus.ROOT_PATH, rerendered, again.root_text, again.edits, owned=False)
    assert entry.before == rerendered and entry.edits == done.edits
    assert record.undo_text(entry, again.root_text, lambda t: t) == rerendered


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("[plugins]\n", "version", "config version 1 is not supported"),
        ("version = 9\n", "version", "must be 2, 3 or 4"),
        ("version = 4\n", "version", "newer than containerd"),
        ('version = 2\nimports = "/x"\n', "imports", "must be a list of paths"),
        ('{{ template "base" . }}\n', "config.toml", "is not valid TOML"),
    ],
)
def test_bad_root_files_are_refused_naming_the_field(text: str, field: str, message: str) -> None:
    from metax_core.errors import InvalidSpec

    with pytest.raises(InvalidSpec) as caught:
        containerd.configure(text, root_path=corpus.ROOT_PATH, schema=detect.containerd_schema((1, 7, 13)))
    assert field in str(caught.value) and message in str(caught.value)
