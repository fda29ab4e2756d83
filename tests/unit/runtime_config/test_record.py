"""The record of our edits (metax_core.runtime.record): its writer's text reads back the same, bad files are
refused naming the field, and `remember` keeps the text from before us across repairs and retries."""

from __future__ import annotations

import pytest

from metax_core.errors import InvalidSpec
from metax_core.runtime import record

ROOT = "/etc/containerd/config.toml"
DROPIN = "/etc/containerd/conf.d/99-metax.toml"
EDIT = record.RootEdit("imports", DROPIN, created_key=True)


def test_render_then_parse_is_the_same_record() -> None:
    rec = record.Record(
        "containerd",
        (
            record.FileRecord(ROOT, False, "version = 2\n# ü\n", "version = 2\nimports = [...]\n", (EDIT,)),
            record.FileRecord(DROPIN, True, None, "version = 2\n"),
        ),
        ("/etc/containerd/conf.d",),
    )
    assert record.parse(record.render(rec)) == rec


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("not json", "is not JSON"),
        ('{"format": 2, "runtime": "containerd", "files": []}', "format: must be 1"),
        ('{"format": 1, "runtime": 3, "files": []}', "needs a runtime"),
        ('{"format": 1, "runtime": "containerd", "files": [{"path": "/x"}]}', "files[0]: is malformed"),
        ('{"format": 1, "runtime": "c", "files": [], "createdDirs": [1]}', "createdDirs: must be a list"),
        (
            '{"format": 1, "runtime": "c", "files": [{"path": "/x", "owned": true, "before": 1, "after": "", '
            '"edits": []}]}',
            "before must be text or null",
        ),
    ],
)
def test_a_bad_record_is_refused_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(InvalidSpec, match=field.replace("[", r"\[").replace("]", r"\]")):
        record.parse(text)


def test_remember_keeps_the_first_before_while_the_file_is_ours_or_untouched() -> None:
    first = record.remember(None, ROOT, "A", "A+ours", (EDIT,), owned=False)
    again = record.remember(first, ROOT, "A", "A+ours", (EDIT,), owned=False)  # a retried write
    assert again == first
    repaired = record.remember(first, ROOT, "B", "B+ours", (EDIT,), owned=False)  # someone re-rendered it
    assert repaired.before == "B" and repaired.edits == (EDIT,)


def test_undo_text_per_case() -> None:
    entry = record.FileRecord(ROOT, False, "A", "A+ours", (EDIT,))
    assert record.undo_text(entry, "A+ours", lambda t: "reversed") == "A"
    assert record.undo_text(entry, "A+ours+admin", lambda t: t.replace("+ours", "")) == "A+admin"
    assert record.undo_text(entry, None, lambda t: t) is record.KEEP
    owned = record.FileRecord(DROPIN, True, None, "ours")
    assert record.undo_text(owned, "changed by someone", lambda t: t) is None


@pytest.mark.parametrize(
    ("entry", "now", "seen", "changed"),
    [
        # a root file: re-rendered by someone (neither before nor ours), or still one of the two
        (record.FileRecord(ROOT, False, "a\n", "a+ours\n"), "b\n", None, True),
        (record.FileRecord(ROOT, False, "a\n", "a+ours\n"), "a\n", None, False),
        (record.FileRecord(ROOT, False, "a\n", "a+ours\n"), "a+ours\n", None, False),
        # our drop-in: removed or changed since this process saw it in place
        (record.FileRecord(DROPIN, True, None, "ours\n"), None, "ours\n", True),
        (record.FileRecord(DROPIN, True, None, "ours\n"), "theirs\n", "ours\n", True),
        # a text that was never before or after us, even when not seen (an agent that just started)
        (record.FileRecord(DROPIN, True, None, "ours\n"), "theirs\n", None, True),
        # missing and never seen: also what a first write killed before its rename leaves
        (record.FileRecord(DROPIN, True, None, "ours\n"), None, None, False),
        # the 1.x drop-in re-made from a changed root: on disk as we saw it
        (record.FileRecord(DROPIN, True, None, "ours\n"), "ours\n", "ours\n", False),
    ],
)
def test_changed_by_others(entry: record.FileRecord, now: str | None, seen: str | None, changed: bool) -> None:
    assert record.changed_by_others(entry, now, seen) is changed


def test_modes_and_owners_read_back_and_an_old_record_without_them_still_reads() -> None:
    rec = record.Record(
        "containerd",
        (record.FileRecord(ROOT, False, "a", "a+ours", (EDIT,), record.FileMode(0o600, 0, 4)),),
    )
    assert record.parse(record.render(rec)) == rec
    assert '"mode": "0600"' in record.render(rec)
    old = (
        '{"format": 1, "runtime": "c", "files": '
        '[{"path": "/x", "owned": false, "before": "a", "after": "b", "edits": []}]}'
    )
    assert record.parse(old).files[0].before_mode is None


@pytest.mark.parametrize(
    "mode",
    ['{"mode": "rw", "uid": 0, "gid": 0}', '{"mode": "0600"}', '"0600"', '{"mode": "77777", "uid": 0, "gid": 0}'],
)
def test_a_bad_mode_is_refused_naming_the_field(mode: str) -> None:
    text = (
        '{"format": 1, "runtime": "c", "files": [{"path": "/x", "owned": false, "before": "a", "after": "b", '
        f'"edits": [], "beforeMode": {mode}}}]}}'
    )
    with pytest.raises(InvalidSpec, match=r"files\[0\]\.beforeMode"):
        record.parse(text)


@pytest.mark.parametrize(
    ("copies", "wanted"),
    [
        ((), record.FileMode(0o644)),
        ((record.FileMode(0o600, 0, 0),), record.FileMode(0o600)),
        ((record.FileMode(0o640, 0, 5), record.FileMode(0o644, 0, 0)), record.FileMode(0o640, 0, 5)),
        ((record.FileMode(0o666, 7, 7),), record.FileMode(0o644, 7, 7)),  # never more than 0644
        ((record.FileMode(0o755, 0, 0), None), record.FileMode(0o644)),
    ],
)
def test_a_created_file_is_no_more_permissive_than_what_it_copies(
    copies: tuple[record.FileMode | None, ...], wanted: record.FileMode
) -> None:
    assert record.created_mode(copies) == wanted


def test_remember_keeps_the_mode_from_before_us_across_our_own_rewrites() -> None:
    first = record.remember(None, ROOT, "A", "A+ours", (EDIT,), owned=False, mode=record.FileMode(0o600))
    assert first.before_mode == record.FileMode(0o600)
    # our own text again (a retried write, another round): the mode from before us stays
    again = record.remember(first, ROOT, "A+ours", "A+ours", (EDIT,), owned=False, mode=record.FileMode(0o644))
    assert again.before_mode == record.FileMode(0o600)
    # re-rendered by someone else with another mode: theirs is the new "before"
    rerendered = record.remember(first, ROOT, "B", "B+ours", (EDIT,), owned=False, mode=record.FileMode(0o640))
    assert rerendered.before_mode == record.FileMode(0o640)
    created = record.remember(None, ROOT, None, "new", (EDIT,), owned=False, mode=None)
    assert created.before_mode is None
