"""How containerd reads its configuration: the root file, then its imports, in containerd's own order (C4).

Why a module of its own: on containerd 1.x (config ``version = 2``) an imported file's plugin section *replaces*
the section merged so far, so what the node runs with is not the root file but the last file in the load order
that defines the section (docs/container-runtime.md, "containerd 1.x: the effective configuration"). Our
drop-in must carry a copy of *that* section, and must come last; a file loaded after it that defines the
section would hide our handler, and a copy of the root's section alone would drop another vendor's runtimes.

What containerd does (``LoadConfig`` in ``services/server/config/config.go``, read at v1.6.20 and v1.7.27, and
``cmd/containerd/server/config/config.go`` at v2.2.0, the same walk):

* a queue starts with the root file; each file taken from it is merged into the result, then its ``imports``
  are appended to the queue: breadth first, each file's imports in its own order;
* an import is cleaned and, when relative, joined to the *importing* file's directory; an entry containing
  ``*`` is a glob (Go's ``filepath.Glob``: sorted matches, ``*`` never crosses ``/``), any other entry a path;
* a path already loaded is skipped (the first occurrence decides the position);
* 1.x merges plugin sections by replacing them whole (``mergeConfig``: "replace entire sections"); 2.x merges
  them key by key.

The walk is pure: the agent gathers the texts and the glob matches (`needed` says which are still missing) and
`walk` orders them.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import tomlkit
import tomlkit.exceptions

from metax_core.errors import FieldError, InvalidSpec


def resolve(entry: str, importer: str) -> str:
    """An ``imports`` entry as containerd resolves it: cleaned, relative to the importing file's directory."""
    path = posixpath.normpath(entry)
    if not path.startswith("/"):
        path = posixpath.normpath(posixpath.join(posixpath.dirname(importer), path))
    return path


def is_glob(path: str) -> bool:
    """containerd treats an import as a glob only when it contains ``*`` (``?`` and ``[`` alone are literal)."""
    return "*" in path


def _segment_pattern(segment: str) -> str:
    # Go's filepath.Match negates a class with ``[^…]``, fnmatch with ``[!…]``; both escape with ``\``.
    return segment.replace("[^", "[!")


def glob_match(pattern: str, path: str) -> bool:
    """Go's ``filepath.Match`` on whole paths: one pattern segment per path segment, ``*`` never crosses ``/``."""
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(
        fnmatch.fnmatchcase(name, _segment_pattern(part)) for part, name in zip(parts, names, strict=True)
    )


def parse(text: str, path: str) -> dict[str, Any]:
    """A configuration file's content as plain data (the file named in the error)."""
    try:
        return dict(tomlkit.parse(text).unwrap())
    except tomlkit.exceptions.ParseError as exc:
        raise InvalidSpec([FieldError(path, f"is not valid TOML: {exc}")]) from None


def imports_of(doc: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """The file's ``imports``, resolved (`resolve`); a value that is not a list of strings is refused."""
    imports = doc.get("imports")
    if imports is None:
        return ()
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise InvalidSpec([FieldError(f"{path}: imports", f"must be a list of paths, got {imports!r}")])
    return tuple(resolve(i, path) for i in imports)


@attrs.frozen
class Walk:
    order: tuple[str, ...]
    """The files in containerd's load order (the root first), each once."""
    docs: Mapping[str, Mapping[str, Any]]
    """Each loaded file's content."""
    missing: tuple[str, ...] = ()
    """Explicit imports that name no file (containerd 1.x refuses to start; 2.4 ignores the imports after it)."""
    wanted_files: tuple[str, ...] = ()
    """Files the walk reached whose text the caller has not gathered yet."""
    wanted_globs: tuple[str, ...] = ()
    """Globs the walk reached whose matches the caller has not gathered yet."""

    @property
    def complete(self) -> bool:
        return not self.wanted_files and not self.wanted_globs


def walk(
    root: str,
    texts: Mapping[str, str | None],
    globs: Mapping[str, Sequence[str]],
    *,
    replace: Mapping[str, Mapping[str, Any]] | None = None,
) -> Walk:
    """containerd's load order from ``root`` over gathered ``texts`` (None: no such file) and ``globs`` (pattern →
    matches). ``replace`` gives the content of a file as it will be (the root with our edit), instead of its text."""
    order: list[str] = []
    docs: dict[str, Mapping[str, Any]] = {}
    missing: list[str] = []
    wanted_files: list[str] = []
    wanted_globs: list[str] = []
    pending = [root]
    while pending:
        path, pending = pending[0], pending[1:]
        if path in docs or path in missing or path in wanted_files:
            continue
        if replace is not None and path in replace:
            doc = replace[path]
        elif path not in texts:
            wanted_files.append(path)
            continue
        else:
            text = texts[path]
            if text is None:
                missing.append(path)
                continue
            doc = parse(text, path)
        docs[path] = doc
        order.append(path)
        for entry in imports_of(doc, path):
            if not is_glob(entry):
                pending.append(entry)
            elif entry in globs:
                pending.extend(sorted(globs[entry]))
            elif entry not in wanted_globs:
                wanted_globs.append(entry)
    return Walk(tuple(order), docs, tuple(missing), tuple(wanted_files), tuple(wanted_globs))


def covered_by(walked: Walk, path: str) -> str | None:
    """The glob of a loaded file's ``imports`` that matches ``path`` (the first), or None."""
    for each in walked.order:
        for entry in imports_of(walked.docs[each], each):
            if is_glob(entry) and glob_match(entry, path):
                return entry
    return None


def get(doc: Mapping[str, Any], *keys: str) -> Any:
    """``doc[k1][k2]…``, or None where a key is missing or a value on the way is not a table."""
    value: Any = doc
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


@attrs.frozen
class Section:
    """A plugin section as containerd 1.x ends up with it: the last file in the order that defines it."""

    body: Mapping[str, Any] | None
    """None: no file defines it (containerd's defaults)."""
    origin: str | None
    """The file whose section is in effect."""


def effective_section(walked: Walk, plugin: str, *, until: str | None = None) -> Section:
    """containerd 1.x's section ``plugins.<plugin>`` from the files loaded before ``until`` (all: None)."""
    found = Section(None, None)
    for path in walked.order:
        if path == until:
            break
        body = get(walked.docs[path], "plugins", plugin)
        if isinstance(body, Mapping):
            found = Section(body, path)
    return found


def defined_after(walked: Walk, plugin: str, after: str) -> tuple[str, ...]:
    """The files loaded after ``after`` that define ``plugins.<plugin>`` (on 1.x each replaces the whole section)."""
    if after not in walked.order:
        return ()
    later = walked.order[walked.order.index(after) + 1 :]
    return tuple(p for p in later if isinstance(get(walked.docs[p], "plugins", plugin), Mapping))


def origin_of(walked: Walk, keys: Sequence[str]) -> str | None:
    """The last loaded file that sets the key path ``keys`` (or the deepest table on its way), for messages."""
    for depth in range(len(keys), 0, -1):
        for path in reversed(walked.order):
            if get(walked.docs[path], *keys[:depth]) is not None:
                return path
    return None
