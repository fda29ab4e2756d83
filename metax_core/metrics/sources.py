"""Where the exporter's GPU telemetry comes from: libmxsml when it is there, mx-smi otherwise (R-EXPORTER).

Why a decision of its own: MetaX's library answers in-process with numbers (and has what mx-smi's summary lacks:
UUIDs, xtt memory), mx-smi is a program to spawn and parse; the exporter picks once, at start, and says which
and why in its log, so "why has this node no uuid label" has an answer. The running driver's own library comes
first (`payload_layout.HOST_LIBRARY` under the host root: staged by driver-manager from the driver payload, as
mx-smi is), then ``METAX_EXPORTER_MXSML_LIBRARY``'s paths, as the exporter's container sees them (default
`DEFAULT_LIBRARIES`, libmxsml's usual install paths, mx-exporter's own search list); empty means mx-smi.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.node import payload_layout

SETTING = "METAX_EXPORTER_MXSML_LIBRARY"
DEFAULT_LIBRARIES: tuple[str, ...] = (
    "/opt/mxdriver/lib/libmxsml.so",
    "/opt/maca/lib/libmxsml.so",
    "/opt/mxn100/lib/libmxsml.so",
)
MX_SMI = "mx-smi"


@attrs.frozen
class Choice:
    library: str | None
    """The library to load; None: mx-smi."""
    why: str


def candidates(host_root: str, setting: Sequence[str]) -> tuple[str, ...]:
    """The paths to try, in order: the running driver's library on the host mounted at ``host_root``, then the
    setting's; none when the setting is empty (mx-smi asked for)."""
    if not setting:
        return ()
    driver = host_root.rstrip("/") + payload_layout.HOST_LIBRARY
    return (driver, *(p for p in setting if p != driver))


def check(paths: Sequence[str]) -> tuple[str, ...]:
    """The setting's paths, each absolute; InvalidSpec naming the setting otherwise."""
    bad = [p for p in paths if not p.startswith("/")]
    if bad:
        raise InvalidSpec([FieldError(SETTING, f"must be absolute paths of libmxsml, got {', '.join(bad)}")])
    return tuple(paths)


def choose(paths: Sequence[str], present: Collection[str]) -> Choice:
    """The first of ``paths`` that is ``present`` (an existing file); mx-smi when none is, or none is asked."""
    if not paths:
        return Choice(None, f"{SETTING} is empty: telemetry from {MX_SMI}")
    for path in check(paths):
        if path in present:
            return Choice(path, f"telemetry from libmxsml at {path}")
    return Choice(None, f"no libmxsml at {', '.join(paths)}: telemetry from {MX_SMI}")


def fallback(path: str, problem: str) -> Choice:
    """A library that is there but cannot be loaded or initialised: mx-smi, saying why."""
    return Choice(None, f"libmxsml at {path} is unusable ({problem}): telemetry from {MX_SMI}")
