"""The MXMACA SDK on a node (C6, R-MACA): where the maca agent installs each version, what a container that asks
for one gets, which containers use which version, and what the agent may remove.

One owner for every host path and file format the maca agent (writer of the versions, reader of the records)
and the container-edit service (reader of the versions, writer of the records) share:

* ``/var/lib/metax/maca/<version>``: one directory per installed version, named by its numbers (``2.18.0.3``).
  A version appears by a rename of a hidden ``.<version>.partial-<n>`` sibling, so a half-copied version is
  never visible; names starting with ``.`` are never versions (`installed`).
* ``/run/metax/maca-in-use/<container id>.json``: written by the edit service before it answers, one per
  container that got an SDK (`render_use` / `parse_use`): the version, and runc's state directory of the
  container, so the agent can tell a live container from a gone one (``state.json`` still there: runc
  removes the directory at ``runc delete``). Under ``/run``: a reboot ends every container and the records.
* In a container: the version read-only at `MOUNT_PATH` (``/opt/maca``), with `environment` appended to the
  container's own ``PATH``/``LD_LIBRARY_PATH`` and ``MACA_PATH`` set.

The removal protocol (`gc_plan`, and the edit service's check): the agent renames a version it means to remove
to a hidden name first, then reads the records again, and renames it back if a record names it; the service
writes its record first, then checks the version is still there. Whichever runs second sees the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core import versions
from metax_core.errors import FieldError, InvalidSpec
from metax_core.wire import agent_env

HOST_DIR = "/var/lib/metax/maca"
"""Where the versions are installed on the host (one directory each)."""
IN_USE_DIR = "/run/metax/maca-in-use"
"""The edit service's records of which container uses which version."""
MOUNT_PATH = "/opt/maca"
"""Where a container sees the version it asked for (read-only)."""
PAYLOAD_SUBDIR = "maca"
"""In a maca payload image, ``/payload/maca/`` is the SDK tree (``bin/``, ``lib/``, …)."""
RESOLVED_ENV = "METAX_MACA_RESOLVED"
"""Set in the container: the version `versions.resolve` chose for its ``METAX_MACA_VERSION``."""
PARTIAL = ".partial-"
REMOVING = ".removing"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""runc's usual ``PATH`` when a container has none (the SDK's bin is appended to it)."""

APPENDED: Mapping[str, tuple[str, ...]] = {
    "PATH": (f"{MOUNT_PATH}/bin", f"{MOUNT_PATH}/mxgpu_llvm/bin"),
    "LD_LIBRARY_PATH": (f"{MOUNT_PATH}/lib", f"{MOUNT_PATH}/mxgpu_llvm/lib"),
}
"""Search paths the SDK adds after the container's own (never in front: the image's own tools win)."""
SET: Mapping[str, str] = {"MACA_PATH": MOUNT_PATH}
"""Variables the SDK sets when the container has none of its own (an image's own value is kept)."""

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,1023}\Z")


def version_dir(version: versions.Version) -> str:
    """The directory name of an installed version: its numbers (``2.18.0.3``)."""
    return ".".join(map(str, version.numbers))


def installed(names: Iterable[str]) -> list[versions.Version]:
    """The versions among directory names under `HOST_DIR`, newest first (hidden and foreign names ignored)."""
    found = {v for n in names if not n.startswith(".") and (v := versions.try_parse(n)) is not None and not v.suffix}
    return sorted(found, reverse=True)


def partial_name(version: versions.Version, nonce: str) -> str:
    return f".{version_dir(version)}{PARTIAL}{nonce}"


def removing_name(version: versions.Version) -> str:
    return f".{version_dir(version)}{REMOVING}"


def leftovers(names: Iterable[str]) -> list[str]:
    """Hidden copies an interrupted install or removal left (removed at the agent's next round)."""
    return sorted(n for n in names if n.startswith(".") and (PARTIAL in n or n.endswith(REMOVING)))


def environment(env: Sequence[str], version: versions.Version) -> list[str]:
    """A container's ``process.env`` with the SDK's variables added after its own values, never replacing them."""
    out = list(env)
    index = {e.partition("=")[0]: i for i, e in enumerate(out)}
    for name, paths in APPENDED.items():
        if name in index:
            have = out[index[name]].partition("=")[2]
            parts = [p for p in have.split(":") if p]
            added = [p for p in paths if p not in parts]
            out[index[name]] = f"{name}={':'.join([*parts, *added])}"
        else:
            base = [DEFAULT_PATH] if name == "PATH" else []
            out.append(f"{name}={':'.join([*base, *paths])}")
    for name, value in {**SET, RESOLVED_ENV: str(version)}.items():
        if name not in index:
            out.append(f"{name}={value}")
    return out


def mount(host_dir: str, version: versions.Version) -> dict[str, Any]:
    """The OCI mount of one installed version at `MOUNT_PATH`, read-only."""
    return {
        "destination": MOUNT_PATH,
        "type": "bind",
        "source": f"{host_dir.rstrip('/')}/{version_dir(version)}",
        "options": ["rbind", "ro", "nosuid", "nodev"],
    }


# --- which container uses which version ----------------------------------------------------------------------


@attrs.frozen
class Use:
    """One container that got an SDK version: written by the edit service, read by the maca agent's GC."""

    container_id: str
    version: str
    state_dir: str
    """runc's state directory of the container (``<runc root>/<id>``): present while the container exists."""


def check_container_id(container_id: str) -> None:
    if not _ID.match(container_id):
        raise InvalidSpec([FieldError("id", f"container id {container_id[:80]!r} is not a runc container id")])


def use_file_name(container_id: str) -> str:
    check_container_id(container_id)
    return f"{container_id}.json"


def state_dir(runc_root: str | None, container_id: str) -> str:
    """runc's state directory for a container (its ``--root``, default ``/run/runc``)."""
    return f"{(runc_root or '/run/runc').rstrip('/')}/{container_id}"


def render_use(use: Use) -> str:
    check_container_id(use.container_id)
    doc = {"container": use.container_id, "version": use.version, "stateDir": use.state_dir}
    return json.dumps(doc, sort_keys=True) + "\n"


def parse_use(text: str) -> Use:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidSpec([FieldError("use", f"not JSON: {exc}")]) from exc
    if not isinstance(doc, dict) or set(doc) != {"container", "version", "stateDir"}:
        raise InvalidSpec([FieldError("use", "must be an object with container, version and stateDir")])
    if not all(isinstance(v, str) and v for v in doc.values()):
        raise InvalidSpec([FieldError("use", "container, version and stateDir must be non-empty strings")])
    check_container_id(doc["container"])
    return Use(doc["container"], doc["version"], doc["stateDir"])


# --- what the maca agent installs and removes ----------------------------------------------------------------


@attrs.frozen
class Wanted:
    """One ``maca.payload.images`` entry as the agent sees it: its reference, version and payload directory."""

    image: str
    version: versions.Version
    payload: str


def wanted(images: Sequence[str], payload_dirs: Sequence[str]) -> list[Wanted]:
    """The versions the payload images bring, from their tags (the webhook makes every tag start with it).

    ``images`` are ``METAX_PAYLOAD_IMAGES`` in order, ``payload_dirs`` where each landed (``<dir>/<n>``).
    InvalidSpec naming the image when a tag carries no version, or two images bring the same version."""
    if len(images) != len(payload_dirs):
        raise InvalidSpec([FieldError(agent_env.PAYLOAD_IMAGES, "one payload directory per image is needed")])
    errors: list[FieldError] = []
    out: list[Wanted] = []
    seen: dict[versions.Version, str] = {}
    for i, (image, payload) in enumerate(zip(images, payload_dirs, strict=True)):
        tag = image.rsplit("/", 1)[-1].partition(":")[2].partition("@")[0]
        version = versions.version_of_tag(tag)
        if version is None:
            field = f"{agent_env.PAYLOAD_IMAGES}[{i}]"
            errors.append(FieldError(field, f"tag of {image!r} does not start with a version"))
            continue
        if version in seen:
            field = f"{agent_env.PAYLOAD_IMAGES}[{i}]"
            errors.append(FieldError(field, f"{image!r} brings {version} as {seen[version]!r}"))
            continue
        seen[version] = image
        out.append(Wanted(image, version, payload))
    if errors:
        raise InvalidSpec(errors)
    return out


@attrs.frozen
class Plan:
    install: tuple[Wanted, ...]
    """Listed and not installed: copy each (hidden) and rename it into place."""
    remove: tuple[versions.Version, ...]
    """Installed, no longer listed, used by no live container."""
    kept: Mapping[versions.Version, tuple[str, ...]]
    """Installed, no longer listed, but still used: version → the containers that use it."""


def plan(want: Sequence[Wanted], have: Iterable[versions.Version], uses: Iterable[Use]) -> Plan:
    """What to install and remove; ``uses`` are the records of LIVE containers (the agent drops dead ones)."""
    have_set = set(have)
    listed = {w.version for w in want}
    users: dict[str, list[str]] = {}
    for u in uses:
        users.setdefault(u.version, []).append(u.container_id)
    stale = sorted(have_set - listed, reverse=True)
    remove = tuple(v for v in stale if version_dir(v) not in users)
    kept = {v: tuple(sorted(users[version_dir(v)])) for v in stale if version_dir(v) in users}
    return Plan(tuple(w for w in want if w.version not in have_set), remove, kept)
