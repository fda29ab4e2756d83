"""The source tree the oldest minor's binaries are built from, prepared inside the build cache (R-COMPAT).

Why this module exists: ``k8s.io/kubernetes`` v1.23.17 ships no ``pkg/generated/openapi/zz_generated.openapi.go``
(1.23's release build generated it and never committed it), and kube-apiserver does not compile without it
(``undefined: generatedopenapi.GetOpenAPIDefinitions``). No upstream code or generated text is kept in this
repository, and Go refuses overlays of files in the module cache, so :func:`prepare` makes a scratch tree in
the build's staging directory (``<cache>/oldest/<key>/src`` once the build is complete):

- ``gen/``: go.mod and go.sum of ``gomod-oldest`` alone, where 1.23's own openapi-gen (``k8s.io/kube-openapi``
  at the version ``k8s.io/kubernetes`` v1.23.17 requires, the module's ``tool`` directive; built from the Go
  module proxy like everything else) is built into ``tools/`` and run;
- ``kubernetes/``: the ``k8s.io/kubernetes`` module from the Go module cache (hard links where the file system
  allows, else copies) plus the generated file;
- ``main/``: go.mod, go.sum and the mains of ``gomod-oldest`` with ``replace k8s.io/kubernetes => ../kubernetes``
  added, where ``go build`` runs.

The generator's input follows 1.23's ``build/root/Makefile.generated_files`` (tagged packages of the repository
and its staging modules): every package of ``k8s.io/kubernetes`` and of the staging modules the build uses with a
``+k8s:openapi-gen=`` tag, minus test and example packages (:func:`openapi_packages`; 80 packages, and a result
byte-identical to the file this repository once carried). The cache key covers go.mod/go.sum (every module
version, the generator's included), the Go toolchain and this file (:func:`fingerprint`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from metax_dev.controlplane import errors, processes

KUBERNETES: Final = "k8s.io/kubernetes"
OPENAPI_GEN: Final = "k8s.io/kube-openapi/cmd/openapi-gen"
OPENAPI_PACKAGE: Final = "k8s.io/kubernetes/pkg/generated/openapi"
OPENAPI_FILE: Final = "zz_generated.openapi"
_TAG: Final = b"+k8s:openapi-gen="
#: Path elements of packages the generator is not given (apimachinery's testapigroup, apiserver's example APIs).
_SKIPPED_PREFIXES: Final = ("test", "example", "sample")


def fingerprint() -> bytes:
    """What of this preparation decides the binaries beyond go.mod/go.sum: its own code (the cache key)."""
    return Path(__file__).read_bytes()


def staging_modules(module_dir: Path) -> dict[str, str]:
    """The ``k8s.io`` modules go.mod pins by ``replace`` whose code the build uses (a zip hash in go.sum)."""
    pins = {}
    for line in (module_dir / "go.mod").read_text().splitlines():
        parts = line.strip().removeprefix("replace").split()
        if len(parts) == 4 and parts[1] == "=>" and parts[0] == parts[2] and parts[0].startswith("k8s.io/"):
            pins[parts[0]] = parts[3]
    zips = {tuple(line.split()[:2]) for line in (module_dir / "go.sum").read_text().splitlines() if " h1:" in line}
    return {path: version for path, version in sorted(pins.items()) if (path, version) in zips}


def openapi_packages(module_dirs: Mapping[str, Path]) -> list[str]:
    """Import paths of the packages with a ``+k8s:openapi-gen=`` tag in ``module_dirs`` (path -> directory)."""
    found = set()
    for module, root in module_dirs.items():
        for directory, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames if d not in ("vendor", "testdata") and not d.startswith((".", "_"))
            )
            relative = Path(directory).relative_to(root)
            if any(part.startswith(_SKIPPED_PREFIXES) for part in relative.parts):
                continue
            for name in filenames:
                source = Path(directory) / name
                if name.endswith(".go") and not name.endswith("_test.go") and _TAG in source.read_bytes():
                    found.add("/".join((module, *relative.parts)))
                    break
    return sorted(found)


def prepare(go: Path, module_dir: Path, scratch: Path, log_path: Path, env: Mapping[str, str]) -> Path:
    """Make the scratch tree under ``scratch`` (see the module docstring); returns the directory to build in."""
    kubernetes_version = _required(module_dir / "go.mod", KUBERNETES)
    gen = scratch / "gen"
    gen.mkdir(parents=True)
    for name in ("go.mod", "go.sum"):
        shutil.copy2(module_dir / name, gen / name)
    wanted = {KUBERNETES: kubernetes_version, **staging_modules(module_dir)}
    dirs = _download(go, gen, wanted, log_path, env)

    openapi_gen = scratch / "tools" / "openapi-gen"
    _run([str(go), "build", "-trimpath", "-o", str(openapi_gen), OPENAPI_GEN], gen, env, log_path, "openapi-gen")

    kubernetes = scratch / "kubernetes"
    _link_tree(dirs[KUBERNETES], kubernetes)
    out = scratch / "openapi-out"
    packages = openapi_packages(dirs)
    (scratch / "openapi-packages.txt").write_text("\n".join(packages) + "\n")
    command = [str(openapi_gen), "-i", ",".join(packages), "-o", str(out), "-p", OPENAPI_PACKAGE, "-O", OPENAPI_FILE]
    command += ["-h", os.devnull, "-r", os.devnull]
    # Go's default -mod=readonly: the generator loads only what go.mod and go.sum pin, and changes neither.
    _run(command, gen, env, log_path, "openapi-gen run")
    generated = out / OPENAPI_PACKAGE / f"{OPENAPI_FILE}.go"
    if not generated.is_file():
        raise errors.ControlPlaneError(f"openapi-gen wrote no {generated}:\n{processes.tail(log_path)}")
    shutil.move(generated, kubernetes / OPENAPI_PACKAGE.removeprefix(KUBERNETES + "/") / generated.name)
    shutil.rmtree(out)

    main = scratch / "main"
    main.mkdir()
    for name in ("go.mod", "go.sum"):
        shutil.copy2(module_dir / name, main / name)
    for source in sorted((module_dir / "cmd").rglob("*.go")):
        target = main / source.relative_to(module_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    _run([str(go), "mod", "edit", f"-replace={KUBERNETES}=../kubernetes"], main, env, log_path, "go mod edit")
    return main


def _required(go_mod: Path, module: str) -> str:
    for line in go_mod.read_text().splitlines():
        parts = line.strip().removeprefix("require").split()
        if len(parts) >= 2 and parts[0] == module and parts[1].startswith("v"):
            return parts[1]
    raise errors.ControlPlaneError(f"{go_mod} does not require {module}")


def _download(
    go: Path, cwd: Path, modules: Mapping[str, str], log_path: Path, env: Mapping[str, str]
) -> dict[str, Path]:
    """``go mod download -json`` of ``modules`` (path -> version): their directories in the module cache."""
    command = [str(go), "mod", "download", "-json", *(f"{p}@{v}" for p, v in modules.items())]
    result = subprocess.run(command, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)
    with log_path.open("a") as log:
        log.write(f"== go mod download: {' '.join(command)}\n{result.stderr}")
    if result.returncode != 0:
        raise errors.ControlPlaneError(f"`go mod download` failed:\n{result.stderr.strip()}\n{result.stdout[-2000:]}")
    decoder, text, found = json.JSONDecoder(), result.stdout, {}
    position = 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        entry, position = decoder.raw_decode(text, position)
        if entry.get("Error") or not entry.get("Dir"):
            raise errors.ControlPlaneError(f"`go mod download` of {entry.get('Path')}: {entry.get('Error')}")
        found[entry["Path"]] = Path(entry["Dir"])
    missing = sorted(set(modules) - set(found))
    if missing:
        raise errors.ControlPlaneError(f"`go mod download` gave no directory for {', '.join(missing)}")
    return found


def _link_tree(source: Path, target: Path) -> None:
    """``source`` (read-only, in the module cache) as hard links under ``target`` (copies across file systems)."""
    for directory, dirnames, filenames in os.walk(source):
        dirnames.sort()
        here = target / Path(directory).relative_to(source)
        here.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            try:
                os.link(Path(directory) / name, here / name)
            except OSError:
                shutil.copyfile(Path(directory) / name, here / name)


def _run(command: Sequence[str], cwd: Path, env: Mapping[str, str], log_path: Path, what: str) -> None:
    with log_path.open("ab") as log:
        log.write(f"== {what}: {' '.join(command)} (in {cwd})\n".encode())
        log.flush()
        completed = subprocess.run(
            list(command),
            check=False,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if completed.returncode != 0:
        raise errors.ControlPlaneError(
            f"{what} failed (exit {completed.returncode}) in {cwd}:\n{processes.tail(log_path)}"
        )
