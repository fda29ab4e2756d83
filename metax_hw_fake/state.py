"""The fake host's extra state (what sysfs does not hold), shared by the test process and the fake tools.

Why: the tree under the root *is* most of the fake kernel's state (driver links, VF directories,
/sys/module), but some facts have no sysfs home: the installed host driver, the GPUs' telemetry and VBIOS,
injected faults, GPU processes. They live in one JSON file, changed only under an exclusive flock so the test
process, the fake tools and several node agents sharing one fake host see one consistent story.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from metax_hw_fake import layout

State = dict[str, Any]
"""The JSON document; keys are documented in `metax_hw_fake.builder` where they are first written."""

_local = threading.local()


@contextlib.contextmanager
def transaction(root: Path) -> Iterator[State]:
    """Lock the fake host, load its state, yield it, save it. Re-entrant within one thread."""
    held: dict[str, State] = getattr(_local, "held", {})
    _local.held = held
    key = str(root)
    if key in held:
        yield held[key]
        return
    with layout.lock_file(root).open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = load(root)
            held[key] = current
            try:
                yield current
            finally:
                # Saved even when the body raised: the tree may already have changed with it.
                del held[key]
                save(root, current)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load(root: Path) -> State:
    with layout.state_file(root).open() as f:
        loaded: State = json.load(f)
    return loaded


def save(root: Path, current: State) -> None:
    target = layout.state_file(root)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=1, sort_keys=True))
    os.replace(tmp, target)
    if layout.mxsml_state(root).exists():  # a fake libmxsml is installed: it answers from the new state
        from metax_hw_fake import mxsml

        mxsml.export(root, current)
