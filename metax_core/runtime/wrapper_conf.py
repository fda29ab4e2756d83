"""The wrapper's settings file, ``<wrapper>.conf`` beside ``metax-container-runtime`` on the host (C4, R-MACA).

One owner: the container-runtime agent renders it here when it installs the wrapper; the wrapper (C,
``services/container_edit/wrapper.c``, ``conf_value``) reads it at every call; tests parse it back here and run
the real wrapper on it (``tests/runtime/test_wrapper_runc.py``). The format is what a small static C program reads
without a parser: ``key=value`` lines, the first line of a key wins, ``#`` lines are comments:

    # Written by the MetaX GPU operator's container-runtime agent ...
    runc=/usr/local/sbin/runc
    socket=/run/metax/container-edit.sock

``runc``: the real runc the wrapper execs (absent: the first ``runc`` on the runtime's PATH that is not the wrapper);
``socket``: the container-edit service's socket. ``$METAX_RUNC`` and ``$METAX_EDIT_SOCKET`` in the wrapper's
environment win over the file. A value holds no newline and is an absolute path (the wrapper runs from any
directory), at most ``PATH_MAX`` bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.runtime import handler

SUFFIX = ".conf"
HEADER = "# Written by the MetaX GPU operator's container-runtime agent; uninstall removes it with the wrapper.\n"
KEYS = ("runc", "socket")
PATH_MAX = 4095


def path_of(wrapper: str) -> str:
    """Where the wrapper looks for its settings: its own path + ``.conf``."""
    return wrapper + SUFFIX


@attrs.frozen
class WrapperConf:
    socket: str = handler.EDIT_SOCKET_HOST_PATH
    runc: str | None = None
    """None: the wrapper finds runc on the runtime's PATH."""


def _check(key: str, value: str, where: str) -> None:
    if not value.startswith("/") or "\n" in value or "\r" in value or "\0" in value or len(value) > PATH_MAX:
        raise InvalidSpec(
            [
                FieldError(
                    f"{where}: {key}", f"must be an absolute path of one line (<= {PATH_MAX} bytes), not {value!r}"
                )
            ]
        )


def render(conf: WrapperConf, where: str = "wrapper settings") -> str:
    values = {"runc": conf.runc, "socket": conf.socket}
    lines = [HEADER]
    for key in KEYS:
        value = values[key]
        if value is None:
            continue
        _check(key, value, where)
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def parse(text: str, where: str = "wrapper settings") -> WrapperConf:
    """As the wrapper reads it: the first ``key=value`` line of each key; other lines are ignored."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in KEYS and value and key not in found:
            found[key] = value
    for key, value in found.items():
        _check(key, value, where)
    return _conf(found)


def _conf(found: Mapping[str, str]) -> WrapperConf:
    return WrapperConf(socket=found.get("socket", handler.EDIT_SOCKET_HOST_PATH), runc=found.get("runc"))
