"""What a process node puts in place of images and of a node's filesystem, for a pod with no command of its own.

Why a module of its own: a real kubelet gets a container's entrypoint and files from its image, and gives it
its own mount namespace (its ``/tmp``, hostPath and emptyDir volumes where the spec mounts them). A process
node has neither, so a pod the operator renders (no ``command``, payload init containers, ``/host/...``
mounts, a probe file in ``/tmp``) could not run on it. `StandIns` is the test's explicit, documented table of
what stands in (docs/processnode.md, "Stand-ins for a GPU node"): an entrypoint per image name (the command
the product image will have), a directory per payload image (what the image holds at ``/payload``), a host
root (a fake GPU host) for hostPath volumes, and tool directories first on PATH. `PathMap` is the mount
table in small: every path a container sees (its env values, its command words, its exec probe) is rewritten
onto the directory that stands for it, so the process and its probe agree on every file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs


def repository(image: str) -> str:
    """The image's name without registry, path and tag: ``registry.example.com/metax/metax-driver:0.1`` →
    ``metax-driver``."""
    last = image.rsplit("/", 1)[-1]
    return last.split("@", 1)[0].split(":", 1)[0]


@attrs.frozen
class StandIns:
    """What a process node standing for one GPU node uses in place of images and the host (test-only)."""

    host_root: Path
    """The node's host filesystem (a fake GPU host): hostPath volumes map here."""
    entrypoints: Mapping[str, Sequence[str]] = attrs.field(factory=dict)
    """Image name (`repository`) → the argv its entrypoint would run, for containers without ``command``."""
    payloads: Mapping[str, Path] = attrs.field(factory=dict)
    """Full image reference → the directory standing for what the image holds at ``payload_source``."""
    payload_source: str = "/payload"
    """Where a payload image keeps its files (the payload image contract, docs/configuration.md)."""
    tool_dirs: Sequence[Path] = ()
    """Directories first on every container's PATH (the fake host's modprobe, insmod, mx-smi, ...)."""

    def entrypoint(self, image: str) -> tuple[str, ...] | None:
        found = self.entrypoints.get(repository(image))
        return tuple(found) if found is not None else None


_BEFORE = r"(?:^|(?<=[\s\"'=:]))"
_AFTER = r"(?=$|[/\s\"':])"


@attrs.frozen
class PathMap:
    """Container paths → local directories, longest prefix first; a path matches whole components only."""

    table: Mapping[str, Path]

    def rewrite(self, text: str) -> str:
        if not self.table:
            return text
        prefixes = sorted(self.table, key=len, reverse=True)
        pattern = re.compile(_BEFORE + "(" + "|".join(re.escape(p.rstrip("/")) for p in prefixes) + ")" + _AFTER)
        by_prefix = {p.rstrip("/"): str(self.table[p]) for p in prefixes}
        return pattern.sub(lambda m: by_prefix[m.group(1)], text)


def path_map(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    pod_dir: Path,
    stand_ins: StandIns | None,
) -> PathMap:
    """The mount table of ``container``: its emptyDir mounts → the pod's volume directories; with stand-ins also
    its hostPath mounts → the host root (a mount ``P + hostPath.path`` makes ``P`` itself the host's ``/``, as
    ``/host`` is for METAX_HOST_ROOT), ``/tmp`` → the pod's own, and a payload image's ``/payload`` → its
    staged directory. Without stand-ins only emptyDir mounts are mapped (as before: a process node's pods
    otherwise see the machine's paths)."""
    volumes = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
    table: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"]) or {}
        target = mount["mountPath"].rstrip("/") or "/"
        if "emptyDir" in volume:
            table[target] = pod_dir / "volumes" / mount["name"]
        elif "hostPath" in volume and stand_ins is not None:
            host_path = volume["hostPath"]["path"].rstrip("/")
            table[target] = stand_ins.host_root / host_path.lstrip("/")
            if target.endswith(host_path) and len(target) > len(host_path):
                table[target[: -len(host_path)]] = stand_ins.host_root
    if stand_ins is not None:
        table.setdefault("/tmp", pod_dir / "tmp")
        staged = stand_ins.payloads.get(str(container.get("image", "")))
        if staged is not None:
            table[stand_ins.payload_source] = staged
    return PathMap(table)


def unstaged_init_images(pod: Mapping[str, Any], stand_ins: StandIns | None) -> list[str]:
    """The init containers' images that have no staged payload directory (all of them without stand-ins)."""
    images = [str(c.get("image", "")) for c in (pod.get("spec") or {}).get("initContainers") or []]
    if stand_ins is None:
        return images
    return [i for i in images if i not in stand_ins.payloads]
