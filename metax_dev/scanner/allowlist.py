"""The reviewed allowlist of the manifest scanner's findings: ``tests/security/scanner-allowlist.yaml``.

Why a file a person reads: each accepted finding is a decision ("metax-driver is privileged because it loads the
kernel module, Table 1.3.1"), and a decision is reviewed like code. The file holds:

* ``reasons`` — each distinct reason once, under a short name (``privileged/metax-driver``), so a reviewer reads
  every argument once and the entries say where it applies;
* ``allowed`` — what 000 Table 1.3.1, §1.3.2/§1.3.3 or a component's doc requires: one entry per finding, one line
  each (a diff shows exactly which privilege came or went), its ``reason`` a name from ``reasons`` or the text
  itself, citing its source;
* ``pending`` — findings that are not accepted but are being fixed, each ``issue`` naming the issue item that fixes
  it (``issue N item M: ...``), or ``open: ...`` for a finding that no item covers yet. The section shrinks as the
  fixes land and is deleted when empty.

An entry names the ``check`` (Checkov's id), the ``object`` (``Kind/name``) and the ``container``; an entry
without a container is about the pod (hostPID, its NetworkPolicy, its token) or the object as a whole. The test
fails on a finding that no entry matches (printed as a ready-to-paste entry with an empty reason: a reviewer must
write one) and on an entry that matches no finding (stale: the privilege went away, so must its entry).
``python -m metax_dev.scanner --write`` regenerates the file from a scan: matched entries kept with their reasons,
stale ones dropped (and the reasons no entry uses any more), new ones added with an empty reason, which the test
refuses until someone writes it.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs
import yaml

from metax_dev.scanner.scan import Finding, sort_key

ALLOWED: Final = "allowed"
PENDING: Final = "pending"
REASONS: Final = "reasons"
#: Which field says why, per section.
WHY: Final[Mapping[str, str]] = {ALLOWED: "reason", PENDING: "issue"}
#: An allowed entry's reason cites where the privilege is required.
CITATION: Final = re.compile(
    r"Table 1\.3\.1|§1\.3\.[1-4]|docs/[\w./-]+\.md|charts/metax-operator/README\.md|R-[A-Z]+|Kubernetes docs"
)
#: A pending entry names the issue item that fixes it, or says that none does yet.
ISSUE: Final = re.compile(r"(issue \d+ item \d+|open): \S")
#: A reason's name (no spaces); anything else is a reason's text.
NAME: Final = re.compile(r"[a-z0-9][a-z0-9./_-]*")
_PLAIN: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*")
_WORDS: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]*( [A-Za-z0-9_./+-]+)*")

HEADER: Final = """\
# The manifest scanner's reviewed allowlist (R-SECURITY, issue 38; docs/security.md "The manifest scanner").
#
# tests/security/test_manifest_scanner.py runs Checkov over the chart (helm template with every option on) and every
# object the operator renders, and fails on any finding that no entry below matches, and on any entry that matches no
# finding (stale). One entry per finding: `check` (Checkov's id), `object` (Kind/name), `container` (none: the pod or
# the object as a whole).
#
# reasons: each reason once, by name; an entry's `reason`/`issue` is such a name or a text of its own.
# allowed: only what 000 Table 1.3.1, §1.3.2/§1.3.3 or the component's doc requires, each reason citing it.
# pending: findings being fixed, each `issue` naming the item that fixes it ("open: ..." when no item covers it yet).
#          Delete an entry when its fix lands (the test says it is stale); delete the section when it is empty.
#
# A new finding: fix the manifest, or add its entry (the test prints it ready to paste) with a reason a reviewer
# accepts. Regenerate after a change: `python -m metax_dev.scanner --write` keeps every matched entry as it is, drops
# stale entries and unused reasons, and adds new entries with an empty reason, refused until someone writes one.
"""


@attrs.frozen
class Entry:
    section: str
    check: str
    object: str
    container: str | None
    #: A name from the file's ``reasons``, or the text itself.
    why: str

    @property
    def key(self) -> tuple[str, str, str | None]:
        return self.check, self.object, self.container


@attrs.frozen
class Allowlist:
    scanner: str
    entries: tuple[Entry, ...]
    reasons: Mapping[str, str] = attrs.field(factory=dict)

    def text(self, entry: Entry) -> str:
        """What an entry says: its named reason's text, or its own."""
        return self.reasons.get(entry.why, entry.why)


@attrs.frozen
class Comparison:
    """A scan against the allowlist: findings no entry matches, and entries no finding matches."""

    new: tuple[Finding, ...]
    stale: tuple[Entry, ...]

    @property
    def clean(self) -> bool:
        return not self.new and not self.stale


class AllowlistError(ValueError):
    """The allowlist file is malformed."""


def load(path: Path) -> Allowlist:
    document = yaml.safe_load(path.read_text()) or {}
    if not isinstance(document, dict):
        raise AllowlistError(f"{path}: expected a mapping with scanner, {REASONS}, {ALLOWED} and {PENDING}")
    unknown = set(document) - {"scanner", REASONS, ALLOWED, PENDING}
    if unknown:
        raise AllowlistError(f"{path}: unknown keys {sorted(unknown)}")
    reasons = document.get(REASONS) or {}
    if not isinstance(reasons, dict) or not all(
        isinstance(v, str) and NAME.fullmatch(str(k)) for k, v in reasons.items()
    ):
        raise AllowlistError(f"{path}: {REASONS} maps names (lower case, no spaces) to texts")
    entries = []
    for section, why in WHY.items():
        for i, item in enumerate(document.get(section) or ()):
            where = f"{path}: {section}[{i}]"
            if not isinstance(item, dict) or set(item) - {"check", "object", "container", why}:
                raise AllowlistError(f"{where}: expected check, object, container and {why}, got {item!r}")
            if not item.get("check") or not item.get("object"):
                raise AllowlistError(f"{where}: check and object are required: {item!r}")
            container = None if item.get("container") is None else str(item["container"])
            entries.append(Entry(section, str(item["check"]), str(item["object"]), container, str(item.get(why) or "")))
    return Allowlist(str(document.get("scanner") or ""), tuple(entries), {str(k): v for k, v in reasons.items()})


def problems(allowlist: Allowlist, scanner: str) -> list[str]:
    """What makes the file unreviewed: a missing or uncited reason, a pending entry without its issue item, a
    reason name that is not defined or that no entry uses, the same finding twice, a file reviewed against another
    scanner version."""
    out = []
    if allowlist.scanner != scanner:
        out.append(f"scanner: the file was reviewed against {allowlist.scanner!r}, the scan ran {scanner!r}")
    seen: dict[tuple[str, str, str | None], Entry] = {}
    for entry in allowlist.entries:
        line = entry_line(entry.check, entry.object, entry.container, WHY[entry.section], entry.why)
        text = allowlist.text(entry)
        if entry.key in seen:
            out.append(f"{entry.section}: twice (also in {seen[entry.key].section}): {line}")
        seen.setdefault(entry.key, entry)
        if NAME.fullmatch(entry.why) and entry.why not in allowlist.reasons:
            out.append(f"{entry.section}: {entry.why!r} is no name under {REASONS}: {line}")
        elif entry.section == ALLOWED and not CITATION.search(text):
            out.append(f"allowed: no reason citing Table 1.3.1, §1.3.2, a doc or a requirement: {line}")
        elif entry.section == PENDING and not ISSUE.match(text):
            out.append(f'pending: no "issue N item M: ..." (or "open: ...") saying what fixes it: {line}')
    used = {e.why for e in allowlist.entries}
    out += [f"{REASONS}: {name!r} is used by no entry" for name in allowlist.reasons if name not in used]
    return out


def compare(findings: Iterable[Finding], allowlist: Allowlist) -> Comparison:
    found = {f.key: f for f in findings}
    listed = {e.key for e in allowlist.entries}
    new = tuple(f for key, f in found.items() if key not in listed)
    stale = tuple(e for e in allowlist.entries if e.key not in found)
    return Comparison(new, stale)


def _scalar(value: str) -> str:
    return value if _PLAIN.fullmatch(value) else json.dumps(value, ensure_ascii=False)


def entry_line(check: str, obj: str, container: str | None, why_field: str, why: str) -> str:
    """One entry as the file writes it: a flow mapping on one line."""
    parts = [f"check: {_scalar(check)}", f"object: {_scalar(obj)}"]
    if container is not None:
        parts.append(f"container: {_scalar(container)}")
    parts.append(f"{why_field}: {why if NAME.fullmatch(why) else json.dumps(why, ensure_ascii=False)}")
    return "- {" + ", ".join(parts) + "}"


def _reason(name: str, text: str) -> str:
    """A named reason, folded (``>-``) at the file's width when it is a plain one-line text."""
    lines = textwrap.wrap(text, 112, break_long_words=False, break_on_hyphens=False)
    if "\n" in text or text != text.strip() or " ".join(lines) != text:
        return f"  {name}: {json.dumps(text, ensure_ascii=False)}\n"
    return f"  {name}: >-\n" + "".join(f"    {line}\n" for line in lines)


def paste(finding: Finding) -> str:
    """A new finding as a ready-to-paste ``allowed`` entry, its reason left for a reviewer."""
    return entry_line(finding.check, finding.object, finding.container, "reason", "") + f"  # {finding.title}"


def render(scanner: str, reasons: Mapping[str, str], entries: Sequence[Entry], titles: Mapping[str, str]) -> str:
    """The whole file: `HEADER`, the scanner line, the reasons by name, then each section sorted by check (a comment
    with the check's title before each check's entries), object and container."""
    name = scanner if _WORDS.fullmatch(scanner) else json.dumps(scanner, ensure_ascii=False)
    out = [HEADER, f"scanner: {name}\n"]
    if reasons:
        out.append(f"\n{REASONS}:\n")
        out += [_reason(key, text) for key, text in sorted(reasons.items())]
    for section in (ALLOWED, PENDING):
        chosen = sorted((e for e in entries if e.section == section), key=lambda e: sort_key(*e.key))
        if not chosen:
            continue
        out.append(f"\n{section}:\n")
        check = None
        for entry in chosen:
            if entry.check != check:
                check = entry.check
                out.append(f"  # {check}: {titles.get(check, '')}".rstrip() + "\n")
            out.append("  " + entry_line(entry.check, entry.object, entry.container, WHY[section], entry.why) + "\n")
    return "".join(out)


def regenerate(allowlist: Allowlist, findings: Sequence[Finding], scanner: str) -> str:
    """The file after a scan: every entry that still matches kept as it is, stale ones dropped with the reasons no
    entry uses any more, each new finding added to ``allowed`` with an empty reason (for a reviewer to write, or to
    move to ``pending``)."""
    found = {f.key for f in findings}
    kept = [e for e in allowlist.entries if e.key in found]
    listed = {e.key for e in kept}
    new = [Entry(ALLOWED, f.check, f.object, f.container, "") for f in findings if f.key not in listed]
    used = {e.why for e in kept}
    reasons = {k: v for k, v in allowlist.reasons.items() if k in used}
    return render(scanner, reasons, [*kept, *new], {f.check: f.title for f in findings})


def summary(comparison: Comparison) -> str:
    """What a failing test prints: the new findings ready to paste, the stale entries to delete."""
    lines = []
    if comparison.new:
        lines.append(
            f"{len(comparison.new)} finding(s) that no entry of the allowlist matches. Fix the manifest, or paste the "
            "entry under `allowed:` with a reason citing what requires it (Table 1.3.1, §1.3.2, the component's doc):"
        )
        lines += [f"  {paste(f)}" for f in comparison.new]
    if comparison.stale:
        n = len(comparison.stale)
        lines.append(f"{n} stale {'entry' if n == 1 else 'entries'}: the scanner no longer finds these; delete them:")
        lines += [f"  {entry_line(e.check, e.object, e.container, WHY[e.section], e.why)}" for e in comparison.stale]
    if lines:
        lines.append("(`python -m metax_dev.scanner --write` rewrites the file this way, new reasons left empty.)")
    return "\n".join(lines)
