"""What the product's images are, read from ``images/images.toml``, and where their Debian packages come from.

Why a module of its own: the build (`metax_dev.images.build`), its tests and the checks that the chart and
the operator reference exactly these images all read the same definitions; the Debian mirror is this
machine's own apt configuration, so no host is ever named in the repository.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metax_core import components

REPO = Path(__file__).resolve().parents[2]
DEFINITIONS = REPO / "images" / "images.toml"
APT_SOURCES = Path("/etc/apt")
ROOT_USER = "0:0"


@dataclass(frozen=True)
class Base:
    suite: str
    variant: str
    packages: tuple[str, ...]
    exclude: tuple[str, ...]
    include: tuple[str, ...]
    epoch: int


@dataclass(frozen=True)
class App:
    venv: str
    lock: Path
    user: str
    source: str


@dataclass(frozen=True)
class Image:
    name: str
    entrypoint: str
    user: str
    """``0:0`` for the privileged agents (their `components.Workload` says so), the app's user otherwise."""

    def reference(self, registry: str, version: str) -> str:
        """What the chart and `metax_core.cluster.workloads.image` call this image."""
        prefix = f"{registry}/" if registry else ""
        return f"{prefix}{self.name}:{version}"


@dataclass(frozen=True)
class Definitions:
    base: Base
    app: App
    images: tuple[Image, ...]
    pending: tuple[str, ...]
    """Workloads the operator renders whose program is not built yet: they have no image."""


def _privileged_workloads() -> frozenset[str]:
    return frozenset(w.name for info in components.CATALOGUE for w in info.workloads if w.privileged)


def load(path: Path = DEFINITIONS) -> Definitions:
    raw: Mapping[str, Any] = tomllib.loads(path.read_text())
    b, a = raw["base"], raw["app"]
    base = Base(
        suite=b["suite"],
        variant=b["variant"],
        packages=tuple(b["packages"]),
        exclude=tuple(b["exclude"]),
        include=tuple(b["include"]),
        epoch=int(b["epoch"]),
    )
    app = App(venv=a["venv"], lock=path.parent / a["lock"], user=a["user"], source=a["source"])
    privileged = _privileged_workloads()
    images = tuple(
        Image(i["name"], i["entrypoint"], ROOT_USER if i["name"] in privileged else app.user) for i in raw["image"]
    )
    return Definitions(base, app, images, tuple(raw["pending"]["names"]))


_ONE_LINE = re.compile(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.+?)\s*$")


def _deb822_stanzas(text: str) -> Iterable[dict[str, str]]:
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields:
            yield fields


def apt_sources(suite: str, apt_dir: Path = APT_SOURCES) -> list[str]:
    """One-line ``deb URI SUITE main`` entries of this machine's apt sources for `suite` and its
    ``-updates``/``-security`` suites (Debian's own archive only: component ``main``)."""
    wanted = {suite, f"{suite}-updates", f"{suite}-security"}
    found: list[str] = []

    def add(uri: str, suites: Iterable[str], comps: Iterable[str]) -> None:
        if "main" not in comps:
            return
        for s in suites:
            entry = f"deb {uri} {s} main"
            if s in wanted and entry not in found:
                found.append(entry)

    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for f in files:
        if not f.is_file():
            continue
        if f.suffix == ".sources":
            for st in _deb822_stanzas(f.read_text()):
                if "deb" in st.get("types", "").split() and st.get("enabled", "yes").lower() != "no":
                    for uri in st.get("uris", "").split():
                        add(uri, st.get("suites", "").split(), st.get("components", "").split())
        elif f.suffix == ".list" or f.name == "sources.list":
            for line in f.read_text().splitlines():
                m = _ONE_LINE.match(line)
                if m:
                    add(m.group(1), [m.group(2)], m.group(3).split())
    return found
