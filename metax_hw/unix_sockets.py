"""A unix socket's file on the host, for a service that listens on one (the container-edit service).

Why here, in the host adapter: the socket is a host file other processes open (the runtime wrapper dials it as
root), so making it, its mode and its removal are host writes like the others (`hostfiles`), kept out of
`services/`.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket


def clear_stale(path: pathlib.Path) -> None:
    """Make ``path``'s directory and remove a socket a killed run left there (nobody listens on it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def bind_private(sock: socket.socket, path: pathlib.Path) -> None:
    """Bind ``sock`` under a staging name, make it root-only (0600), then rename it into place: it appears at its
    path already 0600. Never through the umask: that is the whole process's, and another thread creating files
    meanwhile would get 0600 directories too (CI hit it: the runtime tests and metax_dev.productnode run the
    service in a thread next to code that makes directories)."""
    staging = path.with_name(f".{path.name}~")
    staging.unlink(missing_ok=True)  # left by a run killed between bind and rename
    sock.bind(str(staging))
    try:
        os.chmod(staging, 0o600)
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def remove(path: pathlib.Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
