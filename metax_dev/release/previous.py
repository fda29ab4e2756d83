"""The previous release (N-1) as a real air-gapped bundle, built once from its own commit (issue 40 item 5).

Why: the upgrade tests install release N-1 and upgrade it to this tree. N-1 must be what was really released: the
images, chart and version that commit's own code builds. A copy of HEAD with a smaller version number would only
prove that HEAD upgrades to itself (same CRD, same agents, same host files), which is not what an administrator
upgrades from. Which commit it is says ``previous.toml`` beside this module (version, the full commit sha, tag;
moved at each release). `bundle` builds it:

1. ``git archive <sha> | tar -x`` into a temporary directory. Only the sha is used, so any normal clone of main
   has it, tag or not.
2. The extracted tree gets the git identity the images build reads at a checkout (``git ls-files`` for the
   wheel's files, ``git rev-parse HEAD`` and the commit time for the images' revision label and timestamps, the
   clone's ``origin`` URL for their source label). It gets them from a repository of its own: the commit as
   HEAD, its tree as the index, and the objects borrowed from this clone (``objects/info/alternates``), so
   nothing is copied and this clone is not touched.
3. *That tree's* own ``python -m metax_dev.release bundle --platforms … --bundle …`` runs in a subprocess: this
   interpreter, ``cwd`` the tree, the tree first on ``PYTHONPATH``. This clone's editable install is taken out
   of the subprocess's import system: its finder would otherwise hand the tree, from this clone, any module the
   commit lacks. At exit it checks that no module came from this clone. The tree's code builds the images,
   packages its chart at its version, and writes the bundle as ``./run bundle`` in a clean checkout of that
   commit does.

The result is cached in ``<images cache>/previous/<sha>-<platform>[-<platform>…]/`` (`entry`; the images cache
root is `metax_dev.images.build.cache_root`: ``$METAX_IMAGES_CACHE``, else under ``$XDG_CACHE_HOME``). The entry
holds the bundle tar, ``build.json`` (what was built and how long each step took) and the build's own output
(``bundle.log``, ``bundle.out``). It is built in a temporary directory beside it and renamed into place only
when the build succeeded and its ``bundle.json`` says the expected version and platforms. An entry that exists is
therefore complete, and a killed build leaves only a temporary directory, which the next build removes. An
``flock`` per entry (held by the build's subprocess too) makes a second process wait for the first build
instead of repeating it. Nothing ever rebuilds an entry: a commit's bundle does not change. When
``previous.toml`` moves, the old entry stays until deleted.

Sharing the images cache with HEAD's builds (checked in `metax_dev.images.build` and `metax_dev.images.layers`).
The old tree's build runs with the same environment, so it uses the same cache root and buildah storage:

- The base and deps layers are stored under names made of keys that hash only their inputs. The base key covers
  the platform, ``images.toml``'s ``[base]``, this machine's apt sources, mmdebstrap's version and the layer
  recipe (``layers.RECIPE``). The deps key covers the base key, ``requirements.lock``, pip's version and the
  venv path. The two trees therefore reuse each other's base and deps layers (and base tarball and wheelhouse)
  exactly when those inputs are equal, and build their own when they differ.
- The project's (app) layer is never shared. It is not kept in the cache at all: each build commits it from its
  own tree's wheel straight into the archives under that tree's ``build/images``. Their reuse stamp
  (``build.json`` there) is keyed on every source file, the version and the revision, and it lives in the tree.
- Two caveats. The images build keeps one base and one deps layer per platform (``layers.prune``), so when the
  keys differ, the previous release's build drops HEAD's and HEAD's next build makes them again (once per move
  of ``previous.toml``, since the bundle is cached). And ``publish.make`` names its manifest lists in that storage
  by version (``localhost/metax-release/<name>:<version>``, outside the images build's lock), so a previous build
  and a HEAD release of the same version must not run at the same time.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from metax_dev.images import build as images_build
from metax_dev.release import bundle as release_bundle
from metax_dev.release.target import ReleaseError

logger = logging.getLogger(__name__)

FILE: Final = Path(__file__).resolve().with_name("previous.toml")
"""Which release is the previous one (version, commit, tag)."""
REPO: Final = Path(__file__).resolve().parents[2]
"""The clone this module is in: where the commit's tree comes from."""
DEFAULT_PLATFORMS: Final = ("linux/amd64",)
BUILD_RECORD: Final = "build.json"
STDERR_TAIL: Final = 3000
"""How much of a failed step's stderr its error quotes (the end: where tools say what went wrong)."""

FIELDS: Final = ("version", "commit", "tag")
_SHA: Final = re.compile(r"[0-9a-f]{40}")
_VERSION: Final = re.compile(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?")
_PLATFORM: Final = re.compile(r"[a-z0-9]+/[a-z0-9]+")

_BOOTSTRAP: Final = """\
import runpy, sys
from pathlib import Path
tree, clone = Path.cwd().resolve(), Path(sys.argv.pop(1)).resolve()
def editable(f):
    return str(getattr(f, "__module__", None) or type(f).__module__).startswith("__editable__")
sys.meta_path[:] = [f for f in sys.meta_path if not editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not editable(h)]
sys.path_importer_cache.clear()
def leaked():
    files = {n: Path(getattr(m, "__file__", None) or "/").resolve() for n, m in list(sys.modules.items())}
    venv = Path(sys.prefix).resolve()
    return sorted(n for n, f in files.items()
                  if f.is_relative_to(clone) and not f.is_relative_to(tree) and not f.is_relative_to(venv))
try:
    runpy.run_module("metax_dev.release", run_name="__main__", alter_sys=True)
finally:
    if leaked():
        sys.exit(f"imported from {clone}, not from the commit's tree {tree}: {', '.join(leaked())}")
"""
"""What the subprocess runs (its first argument: this clone's path): the tree's own ``python -m metax_dev.release``
without this clone's editable finder, then a check that no module came from this clone."""


@dataclass(frozen=True)
class Previous:
    """The previous release, as ``previous.toml`` names it."""

    version: str
    commit: str
    """The full commit sha (40 lowercase hex digits)."""
    tag: str

    def __str__(self) -> str:
        return f"previous release {self.version} (commit {self.commit})"


def load(path: Path = FILE) -> Previous:
    """``previous.toml``, checked: every field present and well-formed; an error names the field."""
    try:
        raw: Mapping[str, Any] = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ReleaseError(f"{path}: {exc}") from exc
    if unknown := sorted(set(raw) - set(FIELDS)):
        raise ReleaseError(f"{path}: {', '.join(unknown)}: unknown field (expected {', '.join(FIELDS)})")
    values = {}
    for name in FIELDS:
        if name not in raw:
            raise ReleaseError(f"{path}: {name}: missing")
        if not isinstance(raw[name], str):
            raise ReleaseError(f"{path}: {name}: must be a string, not {type(raw[name]).__name__}")
        values[name] = raw[name]
    version, commit, tag = values["version"], values["commit"], values["tag"]
    if not _VERSION.fullmatch(version):
        raise ReleaseError(f"{path}: version: {version!r} is not a release version like 0.1.0")
    if not _SHA.fullmatch(commit):
        raise ReleaseError(
            f"{path}: commit: {commit!r} is not a full commit sha "
            f"(40 lowercase hex digits, as `git rev-parse {tag}^{{commit}}` prints it)"
        )
    if tag != f"v{version}":
        raise ReleaseError(f"{path}: tag: {tag!r} is not 'v' + version ('v{version}'): move them together")
    return Previous(version, commit, tag)


def cache_dir() -> Path:
    """Where every previous release's entry is kept: ``<images cache>/previous``."""
    return images_build.cache_root() / "previous"


def _platforms(platforms: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(sorted({platforms} if isinstance(platforms, str) else set(platforms)))
    bad = [p for p in chosen if not _PLATFORM.fullmatch(p)]
    if not chosen or bad:
        raise ReleaseError(f"platforms {bad or list(platforms)}: expected names like linux/amd64")
    return chosen


def entry(previous: Previous, platforms: Sequence[str] = DEFAULT_PLATFORMS) -> Path:
    """The cache entry of `previous` built for `platforms`: ``<cache_dir>/<sha>-linux-amd64[-linux-arm64]``."""
    return cache_dir() / "-".join([previous.commit, *(p.replace("/", "-") for p in _platforms(platforms))])


def bundle(platforms: Sequence[str] = DEFAULT_PLATFORMS, *, previous: Previous | None = None) -> Path:
    """The air-gapped bundle tar of the previous release (`load`, unless `previous` is given) for `platforms`,
    built by that commit's own release code the first time and cached (`entry`) after that."""
    previous = previous or load()
    chosen = _platforms(platforms)
    final = entry(previous, chosen)
    tar = final / release_bundle.name(previous.version)
    if tar.is_file():  # an entry only appears by a rename of a complete one
        return tar
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.with_name(final.name + ".lock"), previous) as lock_fd:
        if tar.is_file():
            logger.info("%s: another process built it: %s", previous, tar)
            return tar
        if final.exists():
            raise ReleaseError(
                f"{final}: holds no {tar.name}; previous.toml's version {previous.version} is not the version "
                f"commit {previous.commit} builds (see {final / BUILD_RECORD})"
            )
        for leftover in final.parent.glob(f".{final.name}.*.tmp"):
            logger.info("%s: removing %s, left by a build that did not finish", previous, leftover)
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
        try:
            built = _build(previous, chosen, staging, lock_fd)
            built.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return tar


@contextmanager
def _locked(path: Path, previous: Previous) -> Iterator[int]:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("%s: another process is building it; waiting for %s", previous, path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle.fileno()


def _build(previous: Previous, platforms: tuple[str, ...], staging: Path, lock_fd: int) -> Path:
    """Build the bundle in `staging`; the directory that becomes the cache entry."""
    started = time.monotonic()
    seconds: dict[str, float] = {}
    tree, result = staging / "tree", staging / "entry"
    result.mkdir()
    tar = result / release_bundle.name(previous.version)
    logger.info(
        "%s: building its bundle for %s from the commit's own tree (a cold build takes minutes); log: %s",
        previous,
        ", ".join(platforms),
        result / "bundle.log",
    )
    step = time.monotonic()
    _git(previous, "the commit in this clone", "cat-file", "-e", f"{previous.commit}^{{commit}}")
    _extract(previous, tree)
    _identity(previous, tree)
    seconds["git archive"] = round(time.monotonic() - step, 1)
    logger.info("%s: extracted and identified in %.1f s", previous, seconds["git archive"])
    step = time.monotonic()
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    argv = [
        sys.executable,
        "-c",
        _BOOTSTRAP,
        str(REPO),
        "bundle",
        "--platforms",
        ",".join(platforms),
        "--bundle",
        str(tar),
    ]
    with open(result / "bundle.out", "w") as out, open(result / "bundle.log", "w+") as err:
        # The lock's descriptor goes with the subprocess: if this process is killed, the lock is held until the
        # build underneath has ended too, so the next build does not start beside it.
        done = subprocess.run(
            argv, cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(lock_fd,), check=False
        )
        if done.returncode != 0:
            raise _failed(previous, "the commit's `python -m metax_dev.release bundle`", done.returncode, _tail(err))
    seconds["bundle"] = round(time.monotonic() - step, 1)
    said = _manifest(previous, tar)
    if said.get("version") != previous.version:
        raise ReleaseError(
            f"previous.toml: version: says {previous.version}, but commit {previous.commit} builds "
            f"{said.get('version')!r} (move version, commit and tag together)"
        )
    if sorted(said.get("platforms", [])) != list(platforms):
        raise ReleaseError(f"{previous}: its bundle holds {said.get('platforms')}, asked for {list(platforms)}")
    seconds["total"] = round(time.monotonic() - started, 1)
    record = {
        "version": previous.version,
        "commit": previous.commit,
        "tag": previous.tag,
        "platforms": list(platforms),
        "bundle": tar.name,
        "images": said.get("images", {}),
        "seconds": seconds,
        "python": sys.version.split()[0],
    }
    (result / BUILD_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    size = tar.stat().st_size / 1e6
    logger.info("%s: built %s (%.1f MB) in %.1f s (%s)", previous, tar.name, size, seconds["total"], seconds)
    return result


def _env() -> dict[str, str]:
    """This environment (the caches' variables included) without git's own variables (a hook's ``GIT_DIR``
    would point every git command of the build at another repository)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def _tail(stream: IO[str]) -> str:
    stream.seek(0)
    return stream.read().strip()[-STDERR_TAIL:]


def _failed(previous: Previous, step: str, code: int, stderr: str) -> ReleaseError:
    return ReleaseError(f"{previous}: {step} exited with {code}: {stderr or '(nothing on stderr)'}")


def _git(previous: Previous, step: str, *args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise _failed(previous, f"{step} (git {' '.join(args)})", done.returncode, done.stderr.strip()[-STDERR_TAIL:])
    return done.stdout.strip()


def _extract(previous: Previous, tree: Path) -> None:
    """``git archive <sha> | tar -x -C tree``."""
    tree.mkdir()
    with tempfile.TemporaryFile("w+") as git_err:
        archive = subprocess.Popen(
            ["git", "archive", "--format=tar", previous.commit],
            cwd=REPO,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=git_err,
        )
        assert archive.stdout is not None
        try:
            untar = subprocess.run(
                ["tar", "-x", "-C", str(tree)], stdin=archive.stdout, capture_output=True, text=True, check=False
            )
        finally:
            archive.stdout.close()
            code = archive.wait()
        if code not in (0, -signal.SIGPIPE):
            raise _failed(previous, f"git archive {previous.commit}", code, _tail(git_err))
        if untar.returncode != 0:
            raise _failed(previous, "tar -x (the commit's tree)", untar.returncode, untar.stderr.strip())
        if code != 0:
            raise _failed(previous, f"git archive {previous.commit}", code, _tail(git_err))


def _identity(previous: Previous, tree: Path) -> None:
    """Make `tree` a repository whose HEAD is the commit and whose index is its tree, borrowing this clone's
    objects: the git facts the images build reads are then the commit's, as at a checkout of it."""
    common = _git(previous, "this clone's git directory", "rev-parse", "--path-format=absolute", "--git-common-dir")
    _git(previous, "git init (the tree)", "-c", "init.defaultBranch=previous", "init", "-q", str(tree))
    (tree / ".git" / "objects" / "info" / "alternates").write_text(f"{Path(common) / 'objects'}\n")
    _git(previous, "HEAD and the index at the commit", "reset", "-q", previous.commit, cwd=tree)
    origin = subprocess.run(
        ["git", "config", "--get", "remote.origin.url"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if origin:  # the images' source label (images.toml [app] source) is the clone's origin when it has one
        _git(previous, "the origin URL", "config", "remote.origin.url", origin, cwd=tree)


def _manifest(previous: Previous, tar: Path) -> dict[str, Any]:
    """The bundle's ``bundle.json`` (version, platforms, images)."""
    try:
        with tarfile.open(tar) as archive:
            member = archive.extractfile(release_bundle.MANIFEST)
            if member is None:
                raise KeyError(release_bundle.MANIFEST)
            said: dict[str, Any] = json.load(member)
    except (OSError, KeyError, tarfile.TarError, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{previous}: the build wrote no readable bundle at {tar}: {exc}") from exc
    return said
