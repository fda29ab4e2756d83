"""The corpus of real-world containerd configs (tests/data/containerd), each named ``<containerd version>-<what>``.

``*-default.toml`` are ``containerd config default`` of the real binaries (Debian's 1.6.20, the harness's
2.4.2); the others are written here after the shapes nodes have: a distribution's minimal file, another
vendor's default runtime, kata next to runc, existing ``imports`` lines, a k3s-rendered file."""

from __future__ import annotations

from pathlib import Path

from metax_core.runtime import detect

DATA = Path(__file__).resolve().parents[2] / "data" / "containerd"
ROOT_PATH = "/etc/containerd/config.toml"


def files() -> list[Path]:
    return sorted(DATA.glob("*.toml"))


def version_of(path: Path) -> detect.Version:
    major, minor, patch = (int(p) for p in path.name.split("-", 1)[0].split("."))
    return (major, minor, patch)
