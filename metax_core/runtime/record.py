"""The record of what the container-runtime agent did to the runtime's host files (C4, R-INSTALL).

One JSON file on the host (``/var/lib/metax/container-runtime/record.json``), written atomically *before*
the files it describes are changed, read by the same agent after a restart and at uninstall. For each file:
its text before our first change (``before``; null: there was no file), the text we last wrote
(``after``), and the edits we made (``edits``: for the root file, each key we changed and whether we
created it), and the file's mode and owner before us (``beforeMode``: permission bits as octal text, uid, gid;
null: there was no file; absent in records of agents before it was kept). Uninstall then decides per file
(`undo_text`): still as we left it → exactly ``before``, byte for byte, with its mode and owner; changed since by
someone else → each recorded edit reversed where it is still present, the administrator's changes (and the
mode they gave it) kept; a file we own entirely (the drop-in) → removed.

The record holds the whole text of files that may carry registry credentials: it is written mode 0600
(`PRIVATE`). A file we create that copies another's content is no more permissive than that file
(`created_mode`).

    {"format": 1, "runtime": "containerd", "files": [
      {"path": "/etc/containerd/config.toml", "owned": false, "before": "version = 2\\n…", "after": "…",
       "beforeMode": {"mode": "0600", "uid": 0, "gid": 0},
       "edits": [{"key": "imports", "value": "/etc/containerd/metax/99-metax.toml", "createdKey": true}]},
      {"path": "/etc/containerd/metax/99-metax.toml", "owned": true, "before": null, "after": "…",
       "beforeMode": null, "edits": []}],
     "createdDirs": ["/etc/containerd/metax"]}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import attrs

from metax_core.errors import FieldError, InvalidSpec

FILE_NAME = "record.json"
PATH = f"/var/lib/metax/container-runtime/{FILE_NAME}"
FORMAT = 1


@attrs.frozen
class RootEdit:
    """One change to a file we do not own: ``key`` (``imports``, ``runtimes.metax``) got ``value``."""

    key: str
    value: str
    created_key: bool = False
    """The key did not exist before: reversing the edit removes it (when nothing else is left in it)."""


@attrs.frozen
class FileMode:
    """A host file's permission bits and owner."""

    mode: int
    uid: int = 0
    gid: int = 0

    def render(self) -> dict[str, object]:
        return {"mode": f"{self.mode:04o}", "uid": self.uid, "gid": self.gid}

    @classmethod
    def parse(cls, doc: object, where: str) -> FileMode | None:
        if doc is None:
            return None
        try:
            if not isinstance(doc, Mapping):
                raise ValueError
            mode = int(str(doc["mode"]), 8)
            uid, gid = doc["uid"], doc["gid"]
            if not (0 <= mode <= 0o7777) or not isinstance(uid, int) or not isinstance(gid, int):
                raise ValueError
        except (KeyError, ValueError):
            raise InvalidSpec(
                [FieldError(f"{where}.beforeMode", 'must be {"mode": "<octal>", "uid": <int>, "gid": <int>} or null')]
            ) from None
        return cls(mode, uid, gid)


PRIVATE = FileMode(0o600)
"""The record's own mode: it holds files' whole texts (containerd's may carry registry credentials)."""
DEFAULT_MODE = 0o644


def created_mode(copies: Sequence[FileMode | None]) -> FileMode:
    """The mode and owner of a file we create whose content copies ``copies`` (the first one's owner): no more
    permissive than any of them, and never more than 0644."""
    known = [c for c in copies if c is not None]
    mode = DEFAULT_MODE
    for each in known:
        mode &= each.mode & 0o777
    owner = known[0] if known else FileMode(mode)
    return FileMode(mode, owner.uid, owner.gid)


@attrs.frozen
class FileRecord:
    path: str
    owned: bool
    before: str | None
    after: str
    edits: tuple[RootEdit, ...] = ()
    before_mode: FileMode | None = None
    """The file's mode and owner before us (None: no file then, or a record from before modes were kept)."""


@attrs.frozen
class Record:
    runtime: str
    files: tuple[FileRecord, ...] = ()
    created_dirs: tuple[str, ...] = ()
    """Directories that did not exist before our first write in them (``conf.d``): removed at uninstall when empty."""

    def file(self, path: str) -> FileRecord | None:
        return next((f for f in self.files if f.path == path), None)

    def without(self, path: str) -> Record:
        return Record(self.runtime, tuple(f for f in self.files if f.path != path), self.created_dirs)

    def with_file(self, entry: FileRecord) -> Record:
        others = tuple(f for f in self.files if f.path != entry.path)
        return Record(self.runtime, (*others, entry), self.created_dirs)

    def with_dirs(self, dirs: tuple[str, ...]) -> Record:
        return Record(self.runtime, self.files, (*self.created_dirs, *(d for d in dirs if d not in self.created_dirs)))


def render(record: Record) -> str:
    files = [
        {
            "path": f.path,
            "owned": f.owned,
            "before": f.before,
            "after": f.after,
            "beforeMode": None if f.before_mode is None else f.before_mode.render(),
            "edits": [{"key": e.key, "value": e.value, "createdKey": e.created_key} for e in f.edits],
        }
        for f in record.files
    ]
    doc = {"format": FORMAT, "runtime": record.runtime, "files": files, "createdDirs": list(record.created_dirs)}
    return json.dumps(doc, indent=1) + "\n"


def parse(text: str, path: str = PATH) -> Record:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidSpec([FieldError(path, f"is not JSON: {exc}")]) from None
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise InvalidSpec([FieldError(f"{path}: format", f"must be {FORMAT}")])
    runtime = doc.get("runtime")
    files = doc.get("files")
    if not isinstance(runtime, str) or not isinstance(files, list):
        raise InvalidSpec([FieldError(path, "needs a runtime (text) and files (a list)")])
    out: list[FileRecord] = []
    for i, f in enumerate(files):
        where = f"{path}: files[{i}]"
        try:
            edits = tuple(RootEdit(str(e["key"]), str(e["value"]), bool(e["createdKey"])) for e in f["edits"])
            before = f["before"]
            if not (before is None or isinstance(before, str)) or not isinstance(f["after"], str):
                raise TypeError("before must be text or null and after text")
            mode = FileMode.parse(f.get("beforeMode"), where)
            out.append(FileRecord(str(f["path"]), bool(f["owned"]), before, f["after"], edits, mode))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidSpec([FieldError(where, f"is malformed: {exc}")]) from None
    dirs = doc.get("createdDirs", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise InvalidSpec([FieldError(f"{path}: createdDirs", "must be a list of paths")])
    return Record(runtime, tuple(out), tuple(dirs))


KEEP = object()
"""`undo_text`'s answer when the file is to be left as it is."""


def undo_text(entry: FileRecord, current: str | None, reverse: Callable[[str], str]) -> str | object | None:
    """What the file must be after uninstall: its text, None (no file) or `KEEP`.

    ``reverse`` undoes the recorded edits structurally on a text that someone changed after us."""
    if current == entry.after:
        return entry.before
    if current is None:
        return KEEP  # gone already: nothing of ours is there
    if entry.owned:
        return None
    return reverse(current)


def remember(
    previous: FileRecord | None,
    path: str,
    current: str | None,
    after: str,
    edits: tuple[RootEdit, ...],
    owned: bool,
    mode: FileMode | None = None,
) -> FileRecord:
    """The record of a file about to become ``after`` (``mode``: its mode and owner now, None: no file).

    ``before`` (and its mode) stays the first text we saw while the file is ours or as it was then (a write that
    a restart interrupted); when someone else has changed it since we wrote it, their text (and mode) is the new
    ``before`` (uninstall gives them back what they made). Edits accumulate without repeats."""
    before, before_mode = current, mode
    kept: tuple[RootEdit, ...] = ()
    if previous is not None and current in (previous.before, previous.after):
        before = previous.before
        before_mode = previous.before_mode if previous.before_mode is not None or before is None else mode
        kept = previous.edits
    elif previous is not None:
        kept = previous.edits
    merged = kept + tuple(e for e in edits if e not in kept)
    return FileRecord(path, owned, before, after, merged, before_mode if before is not None else None)


def changed_by_others(entry: FileRecord, now: str | None, seen: str | None = None) -> bool:
    """Whether someone else changed a recorded file that is now ``now`` (None: no file).

    A root file: its text is neither the one before us nor ours (a re-render by config management). An owned
    file: changed or removed since this process last ``seen`` it in place, or holding a text that was never
    before or after us. A removal is told from a first write killed before its rename (both leave no file) only
    by ``seen``: an agent that restarts finds the drop-in missing and writes it without a word."""
    if not entry.owned:
        return now not in (entry.before, entry.after)
    return (seen is not None and now != seen) or now not in (None, entry.before, entry.after)


def undo_plan(
    rec: Record, current: Mapping[str, str | None], reverse: Callable[[FileRecord, str], str]
) -> dict[str, str | None]:
    """Per recorded file, what it must become at uninstall (files to leave alone are not listed)."""
    out: dict[str, str | None] = {}
    for entry in rec.files:
        now = current.get(entry.path)
        target = undo_text(entry, now, lambda text, e=entry: reverse(e, text))  # type: ignore[misc]
        if target is not KEEP and target != now:
            out[entry.path] = target  # type: ignore[assignment]
    return out
