"""Checkov, installed once into a cached virtual environment of its own, and one run of it over a directory.

Why its own environment: Checkov brings about 95 packages (boto3, numpy, networkx, ...) and pins some that the
test environment has newer (``packaging``, ``python-dateutil``); installed into ``.venv`` it would change what
ruff, mypy and the tests run with. So it is installed from ``requirements.lock`` (every package pinned, wheels
only: nothing is compiled) into ``<cache>/<key>/venv``, where the key hashes everything that decides the
environment: the lock file, the interpreter's version and the platform. The same inputs reuse it in no time;
a file lock makes concurrent sessions wait for one install, as the Go builds do
(:mod:`metax_dev.controlplane.build`). Only the sessions whose tests scan install it (tests/security/conftest.py).

Upgrading Checkov: ``python -m metax_dev.scanner --lock VERSION`` rewrites the lock (a resolution by pip, no
install), then the allowlist is reviewed against the new version's findings (its ``scanner`` line names it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from metax_dev import cachedir

#: The pinned requirements of the scanner's environment (package data beside this module).
LOCK: Final = Path(__file__).resolve().parent / "requirements.lock"
#: Environments kept in the cache (about 300 MB each); older ones are removed after an install.
CACHE_KEEP: Final = 2
PACKAGE: Final = "checkov"
#: How pip installs the lock: wheels only (nothing compiles), quietly.
_PIP_FLAGS: Final = ("--quiet", "--disable-pip-version-check", "--only-binary=:all:")

_LOCK_HEADER: Final = (
    "# The manifest scanner's own environment (metax_dev/scanner/checkov.py): Checkov and all it needs, pinned,\n"
    "# wheels only. Regenerate with `python -m metax_dev.scanner --lock VERSION` (a pip resolution for {python} on\n"
    "# {machine}), then review tests/security/scanner-allowlist.yaml against that version's findings.\n"
)

#: Checkov's settings for an offline, reproducible run: no update check, no download of Prisma Cloud's mappings or
#: guidelines, parse errors fail the run.
RUN_ENV: Final = {
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true",
    "BC_SKIP_MAPPING": "TRUE",
    "CKV_PARSE_ERROR_FAIL": "true",
    "LOG_LEVEL": "WARNING",
    "PYTHONWARNINGS": "ignore",
}


class ScannerError(RuntimeError):
    """The scanner could not be installed or run, or said something this module does not understand."""


def cache_root() -> Path:
    """Where scanner environments are kept: ``$METAX_SCANNER_CACHE`` or the XDG cache dir."""
    return cachedir.cache_dir("scanner", "METAX_SCANNER_CACHE")


def locked_version(lock: Path = LOCK) -> str:
    """The Checkov version ``lock`` pins."""
    for line in lock.read_text().splitlines():
        if match := re.fullmatch(rf"{PACKAGE}==(\S+)", line.strip()):
            return match.group(1)
    raise ScannerError(f"{lock} pins no {PACKAGE}")


def _interpreter() -> str:
    return f"{platform.python_implementation()} {platform.python_version()} {sys.platform} {platform.machine()}"


def install_key(lock: Path = LOCK) -> str:
    """Hash of everything that decides the environment: the lock, the interpreter and the platform."""
    digest = hashlib.sha256()
    digest.update(lock.read_bytes() + b"\0")
    digest.update(_interpreter().encode() + b"\0")
    digest.update(" ".join(_PIP_FLAGS).encode())
    return digest.hexdigest()[:20]


@attrs.frozen
class Installed:
    """Where the scanner is and what getting it cost."""

    venv: Path
    version: str
    seconds: float
    cached: bool
    key: str

    @property
    def program(self) -> Path:
        return self.venv / "bin" / PACKAGE


def install(*, lock: Path = LOCK, cache_dir: Path | None = None, force: bool = False, quiet: bool = False) -> Installed:
    """Install Checkov from ``lock`` into a cached virtual environment, or reuse the one for the same inputs.

    A venv is not relocatable (its scripts name its interpreter by path), so it is made in place under the file
    lock; the ``complete`` stamp, written last, says it is whole. A run that died half-way leaves no stamp, and
    the next one starts again from nothing."""
    started = time.monotonic()
    version = locked_version(lock)
    key = install_key(lock)
    root = cache_dir or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / key
    venv = target / "venv"
    stamp = target / "complete"

    def report(cached: bool) -> Installed:
        result = Installed(venv, version, time.monotonic() - started, cached, key)
        if not quiet:
            how = "reused cached" if cached else "installed"
            print(f"scanner: {how} {PACKAGE} {version} in {result.seconds:.1f}s: {venv}", file=sys.stderr, flush=True)
        return result

    with (root / f"{key}.lock").open("w") as file_lock:
        fcntl.flock(file_lock, fcntl.LOCK_EX)
        if stamp.is_file() and not force and (venv / "bin" / PACKAGE).is_file():
            stamp.touch()  # marks it recently used, see _prune
            return report(cached=True)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        if not quiet:
            print(f"scanner: installing {PACKAGE} {version} from {lock} ...", file=sys.stderr, flush=True)
        try:
            _run([sys.executable, "-m", "venv", str(venv)], "creating the scanner's virtual environment")
            _run([str(venv / "bin" / "pip"), "install", *_PIP_FLAGS, "-r", str(lock)], f"installing {lock}")
            said = _run([str(venv / "bin" / PACKAGE), "--version"], f"starting {PACKAGE}", env=RUN_ENV).strip()
            if said.splitlines()[-1:] != [version]:
                raise ScannerError(f"{PACKAGE} --version says {said!r}, the lock pins {version}")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        stamp.write_text(json.dumps({"version": version, "interpreter": _interpreter()}) + "\n")
    _prune(root, keep=CACHE_KEEP, current=key)
    return report(cached=False)


def _run(argv: list[str], what: str, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        argv,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise ScannerError(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n{tail}")
    return done.stdout


def _prune(root: Path, *, keep: int, current: str) -> None:
    """Remove all but the ``keep`` most recently used environments (never ``current``)."""
    entries = [d for d in root.iterdir() if d.is_dir() and (d / "complete").is_file()]
    entries.sort(key=lambda d: (d / "complete").stat().st_mtime, reverse=True)
    for stale in [d for d in entries if d.name != current][max(0, keep - 1) :]:
        shutil.rmtree(stale, ignore_errors=True)
        with contextlib.suppress(OSError):
            (root / f"{stale.name}.lock").unlink()


def lock_text(version: str) -> str:
    """A new ``requirements.lock`` for Checkov ``version``: pip resolves it (wheels only) for this interpreter,
    nothing is installed."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                *_PIP_FLAGS,
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                f"{PACKAGE}=={version}",
            ],
            f"resolving {PACKAGE}=={version}",
        )
        resolved: dict[str, Any] = json.loads(report.read_text())
    pins = sorted(
        (_canonical(item["metadata"]["name"]), item["metadata"]["version"]) for item in resolved.get("install", [])
    )
    if (PACKAGE, version) not in pins:
        raise ScannerError(f"pip's resolution of {PACKAGE}=={version} does not contain it")
    header = _LOCK_HEADER.format(python=platform.python_version(), machine=f"{sys.platform} {platform.machine()}")
    return header + "".join(f"{name}=={ver}\n" for name, ver in pins)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def run(installed: Installed, directory: Path) -> dict[str, Any]:
    """Checkov's JSON report of every Kubernetes manifest under ``directory``.

    ``--soft-fail``: failed checks are the report's content, not an error, so any other exit is one;
    ``--compact`` leaves the code blocks out. The run reads nothing from the network."""
    argv = [
        str(installed.program),
        "--directory",
        str(directory),
        "--framework",
        "kubernetes",
        "--output",
        "json",
        "--compact",
        "--skip-download",
        "--soft-fail",
    ]
    done = subprocess.run(
        argv,
        cwd=directory,
        env={**os.environ, **RUN_ENV},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise ScannerError(f"{PACKAGE} failed (exit {done.returncode}) on {directory}:\n{done.stderr[-3000:]}")
    try:
        report = json.loads(done.stdout)
    except ValueError as exc:
        raise ScannerError(f"{PACKAGE} printed no JSON report on {directory}: {exc}\n{done.stdout[:2000]}") from exc
    if isinstance(report, list):  # one report per framework; only kubernetes runs
        (report,) = [r for r in report if r.get("check_type") == "kubernetes"]
    if not isinstance(report, dict) or "results" not in report:
        raise ScannerError(f"{PACKAGE} found no Kubernetes manifest under {directory}: {str(report)[:500]}")
    errors = report.get("summary", {}).get("parsing_errors", 0)
    if errors:
        raise ScannerError(f"{PACKAGE} could not parse {errors} file(s) under {directory}: {report['results']}")
    return dict(report)
