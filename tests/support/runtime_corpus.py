"""The corpus of real container-runtime configurations (tests/data/runtime_corpus, its README says how it was
gathered): one case per node, the files at their node paths and ``case.toml`` with each file's source (repository,
ref, commit, path), install mode and the runtime version it is written for."""

from __future__ import annotations

import pathlib
import tomllib
from collections.abc import Mapping

import attrs

from metax_core.runtime import containerd_imports, detect

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "runtime_corpus"


@attrs.frozen
class CorpusFile:
    path: str
    """Its node path."""
    mode: int
    repo: str
    ref: str
    commit: str
    source: str
    notes: str


@attrs.frozen
class Case:
    runtime: str
    name: str
    directory: pathlib.Path
    description: str
    version: detect.Version
    expect: str
    root: str
    files: tuple[CorpusFile, ...]

    @property
    def id(self) -> str:
        return f"{self.runtime}/{self.name}"

    @property
    def refused(self) -> bool:
        return self.expect == "refused"

    def text(self, path: str) -> str | None:
        found = self.directory / path.lstrip("/")
        return found.read_text() if found.is_file() else None

    def texts(self) -> dict[str, str | None]:
        """Every file of the case by node path (the root as None when the node has none)."""
        out: dict[str, str | None] = {f.path: self.text(f.path) for f in self.files}
        out.setdefault(self.root, None)
        return out

    def globs(self, patterns: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """Each glob's matches among the case's files (the node has no others)."""
        return {
            p: tuple(sorted(f.path for f in self.files if containerd_imports.glob_match(p, f.path))) for p in patterns
        }

    def install(self, host_root: pathlib.Path) -> dict[str, pathlib.Path]:
        """The case's files under ``host_root`` at their node paths, with their install modes."""
        placed = {}
        for f in self.files:
            target = host_root / f.path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((self.directory / f.path.lstrip("/")).read_bytes())
            target.chmod(f.mode)
            placed[f.path] = target
        return placed


def _version(text: str) -> detect.Version:
    major, minor, patch = (int(p) for p in text.split("."))
    return (major, minor, patch)


def _case(directory: pathlib.Path) -> Case:
    doc = tomllib.loads((directory / "case.toml").read_text())
    files = tuple(
        CorpusFile(f["path"], int(f["mode"], 8), f["repo"], f["ref"], f["commit"], f["source"], f.get("notes", ""))
        for f in doc["files"]
    )
    return Case(
        doc["runtime"],
        directory.name,
        directory,
        doc["description"],
        _version(doc["version"]),
        doc["expect"],
        doc["root"],
        files,
    )


def cases(runtime: str | None = None) -> list[Case]:
    found = [_case(d) for d in sorted(DATA.glob("*/*")) if (d / "case.toml").is_file()]
    return [c for c in found if runtime is None or c.runtime == runtime]


def gathered(case: Case, root_text: str | None = None) -> tuple[Mapping[str, str | None], dict[str, tuple[str, ...]]]:
    """What the agent gathers for a containerd case's plan: every file the root imports, and each glob's matches."""
    texts = case.texts()
    if root_text is not None:
        texts[case.root] = root_text
    globs: dict[str, tuple[str, ...]] = {}
    for _ in range(64):
        walked = containerd_imports.walk(case.root, texts, globs)
        if walked.complete:
            break
        for path in walked.wanted_files:
            texts[path] = None
        globs.update(case.globs(walked.wanted_globs))
    return {p: t for p, t in texts.items() if p != case.root}, globs
