"""The root file's edit on its own (C4, R-INSTALL): bad root files refused naming the field, an absent root file
created and removed again, an administrator's edit made meanwhile surviving the undo, a re-render that dropped our
import repaired with the record following. (tests/unit/runtime_config/test_corpus.py runs the round trip over the
real nodes' files; test_containerd_effective.py the 1.x rules.)"""

from __future__ import annotations

import pytest
import tomlkit

from metax_core.errors import InvalidSpec
from metax_core.runtime import containerd, detect, record
from tests.support import runtime_corpus

ROOT_PATH = "/etc/containerd/config.toml"


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
    with pytest.raises(InvalidSpec) as caught:
        containerd.configure(text, root_path=ROOT_PATH, schema=detect.containerd_schema((1, 7, 13)))
    assert field in str(caught.value) and message in str(caught.value)


def test_an_absent_root_file_is_created_and_removed_again() -> None:
    done = containerd.configure(None, root_path=ROOT_PATH, schema=detect.containerd_schema((2, 4, 2)))
    assert tomlkit.parse(done.root_text).unwrap() == {"version": 4, "imports": [done.dropin]}
    entry = record.remember(None, ROOT_PATH, None, done.root_text, done.edits, owned=False)
    assert record.undo_text(entry, done.root_text, lambda t: t) is None


def test_an_administrators_edit_made_meanwhile_survives_the_undo() -> None:
    """kubespray's file (tests/data/runtime_corpus): its CNI directory changed by the administrator after us."""
    case = next(c for c in runtime_corpus.cases("containerd") if c.name == "kubespray-1.7")
    original = case.text(case.root)
    assert original is not None and "max_container_log_line_size = " in original
    done = containerd.configure(original, root_path=case.root, schema=detect.containerd_schema(case.version))
    entry = record.remember(None, case.root, original, done.root_text, done.edits, owned=False)
    edited = done.root_text.replace("max_container_log_line_size = ", "max_container_log_line_size = 1")
    undone = record.undo_text(entry, edited, lambda t: containerd.unconfigure(t, entry.edits, case.root))
    assert undone == original.replace("max_container_log_line_size = ", "max_container_log_line_size = 1")


def test_a_rerender_that_dropped_our_import_is_repaired_and_the_record_follows() -> None:
    original = "version = 4\n"
    schema = detect.containerd_schema((2, 4, 2))
    done = containerd.configure(original, root_path=ROOT_PATH, schema=schema)
    entry = record.remember(None, ROOT_PATH, original, done.root_text, done.edits, owned=False)
    rerendered = "version = 4\n# rendered by config management\n"
    again = containerd.configure(rerendered, root_path=ROOT_PATH, schema=schema)
    assert again.edits == done.edits
    entry = record.remember(entry, ROOT_PATH, rerendered, again.root_text, again.edits, owned=False)
    assert entry.before == rerendered and entry.edits == done.edits
    assert record.undo_text(entry, again.root_text, lambda t: t) == rerendered


def test_the_node_s_own_root_file_is_the_root_without_our_imports_only() -> None:
    """What the dump before a write is taken from: every drop-in of ours unimported, the administrator's imports
    kept; on containerd 2.x our 1.x drop-in is stale (removed where it exists)."""
    admin = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    done = containerd.configure(admin, root_path=ROOT_PATH, schema=detect.containerd_schema((1, 7, 13)))
    assert containerd.dropin_path(ROOT_PATH, 2) in done.root_text
    assert (
        tomlkit.parse(containerd.without_our_imports(done.root_text, ROOT_PATH)).unwrap()
        == tomlkit.parse(admin).unwrap()
    )
    assert done.stale == (containerd.dropin_path(ROOT_PATH, 3),)
    newer = containerd.configure(admin, root_path=ROOT_PATH, schema=detect.containerd_schema((2, 4, 2)))
    assert newer.stale == (containerd.dropin_path(ROOT_PATH, 2),)
