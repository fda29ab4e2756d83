"""A fake MetaX host's device nodes made real for a real node: character devices with the numbers of
``/dev/null`` (harmless when opened), and a stand-in for udev that keeps them so while the fake kernel creates
new ones (shared by the real-node tests, the end-to-end test, the real-node demo and the benchmarks)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

#: The device numbers the fake hosts' device nodes get: those of /dev/null (harmless when opened).
DEVICE_NUMBERS = (1, 3)


def make_device_nodes_real(root: Path) -> list[Path]:
    """Replace the fake host's device node files by character devices (the numbers of /dev/null)."""
    made = []
    for path in sorted([*(root / "dev/dri").glob("*"), *(root / "dev/vfio").glob("*"), root / "dev/mxcd"]):
        if path.exists() and not path.is_char_device():
            path.unlink()
            os.mknod(path, 0o666 | 0o020000, os.makedev(*DEVICE_NUMBERS))
            made.append(path)
    return made


@contextmanager
def udev(root: Path, interval: float = 0.2) -> Iterator[None]:
    """While the block runs, turn the device nodes the fake kernel creates as plain files (after a driver
    reload, for new VFs) into character devices, as udev does on a real host."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            # the fake kernel may remove or rewrite a node meanwhile: the next pass catches up
            with suppress(OSError):
                make_device_nodes_real(root)

    thread = threading.Thread(target=run, name="udev", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
