"""Running host tools (modprobe, rmmod, insmod, modinfo, mx-smi) with a timeout, through `sh`.

Why: a hung vendor tool must not hang a node agent, and a failing one must say why in the operator's
words. Every call here has a deadline (the process is killed when it passes), runs under ``LC_ALL=C`` so
messages are stable, and any failure — not found, non-zero exit, signal, timeout — becomes a
`HardwareError` carrying the tool's stderr.

Where the tool comes from is a decision, not an accident (docs/hardware.md, "Tools"):

- `ExecMode.DIRECT` runs the tool found on the search path: the host's own tools on a bare host, the tools
  shipped in the agent image in a container (mx-smi talks to ``/dev`` and ``/sys``, which the pod mounts),
  and the fake host's executables in tests.
- `ExecMode.HOST` runs the *host's* tool inside the host's mount namespace (``nsenter --target 1 --mount``,
  possible because the driver DaemonSet has hostPID, which 000 §1.3.3 grants exactly for driver loading).
  That is how the host's modprobe sees the host's ``/lib/modules``, depmod data and ``/etc/modprobe.d``
  without mounting the host's root filesystem into the pod (000 §1.3.2 does not allow it). We do not use
  ``modprobe -d <root>``: it would pair the image's kmod with the host's module tree and ignore the host's
  modprobe configuration.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
from collections.abc import Mapping, Sequence

import attrs

from metax_core import errors
from metax_core.node import payload_layout

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10.0
"""Seconds a tool may take before it is killed (mx-smi on a healthy 8-GPU node answers in about one)."""

_MAX_MESSAGE = 2000

MODPROBE = "modprobe"
INSMOD = "insmod"
RMMOD = "rmmod"
MODINFO = "modinfo"
NSENTER = "nsenter"
MX_SMI = "mx-smi"

HOST_TOOLS: Mapping[str, str | None] = {
    MODPROBE: "kmod",
    INSMOD: "kmod",
    RMMOD: "kmod",
    MODINFO: "kmod",
    NSENTER: "util-linux",
    MX_SMI: None,
}
"""Every program this adapter runs, and the Debian package the agent images take it from (docs/images.md).

The one place that says so: the adapter calls tools only through these names (tests/hw/test_tools_declared.py
checks every call), and the image tests check each packaged tool is in the image. ``None``: MetaX's own tool,
not in Debian and not redistributable here; it reaches the agent from the driver/SDK payload, not the image."""


def driver_tools_path(host_root: os.PathLike[str] | str) -> list[str]:
    """Where mx-smi is looked for: the running driver's tools on the host mounted at ``host_root``
    (`payload_layout.HOST_TOOLS_DIR`, staged by driver-manager from the driver payload: no image carries MetaX's
    tool), then the agent's own PATH."""
    path = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return [os.path.join(os.fspath(host_root), payload_layout.HOST_TOOLS_DIR.lstrip("/")), *path]


class ExecMode(enum.Enum):
    DIRECT = "direct"
    HOST = "host"


@attrs.frozen
class ToolOutput:
    stdout: str
    stderr: str


def _text(raw: object) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return str(raw) if raw is not None else ""


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_MESSAGE else "..." + text[-_MAX_MESSAGE:]


class ToolRunner:
    """Runs one tool at a time with a deadline; every failure is a HardwareError."""

    def __init__(
        self,
        search_path: Sequence[str] | None = None,
        mode: ExecMode = ExecMode.DIRECT,
        timeout: float = DEFAULT_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.search_path = tuple(search_path) if search_path is not None else None
        self.mode = mode
        self.timeout = timeout
        self._extra_env = dict(env or {})

    def _path(self) -> str:
        if self.search_path is not None:
            return os.pathsep.join(self.search_path)
        return os.environ.get("PATH", os.defpath)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"LC_ALL": "C", "LANG": "C", "PATH": self._path()})
        env.update(self._extra_env)
        return env

    def _argv(self, tool: str, args: Sequence[str], operation: str, device: str | None) -> tuple[str, list[str]]:
        if self.mode is ExecMode.HOST:
            nsenter = shutil.which(NSENTER, path=self._path())
            if nsenter is None:
                raise errors.HardwareError(operation, device, "nsenter not found: cannot reach the host's tools")
            return nsenter, ["--target", "1", "--mount", "--", tool, *args]
        exe = shutil.which(tool, path=self._path())
        if exe is None:
            raise errors.HardwareError(operation, device, f"{tool} not found on PATH {self._path()}")
        return exe, list(args)

    def run(
        self,
        tool: str,
        args: Sequence[str],
        *,
        operation: str,
        device: str | None = None,
        timeout: float | None = None,
    ) -> ToolOutput:
        deadline = self.timeout if timeout is None else timeout
        exe, argv = self._argv(tool, args, operation, device)
        logger.debug("running %s %s (timeout %gs)", exe, " ".join(argv), deadline)
        import sh  # at the first run: the data-exporter on libmxsml never runs a tool (its memory)

        try:
            result = sh.Command(exe)(
                *argv,
                _return_cmd=True,
                _timeout=deadline,
                _env=self._env(),
                _tty_out=False,
                _in=None,
            )
        except sh.TimeoutException as exc:
            raise errors.HardwareError(
                operation, device, f"{tool} did not answer within {deadline:g} s and was killed"
            ) from exc
        except sh.SignalException as exc:
            raise errors.HardwareError(
                operation, device, f"{tool} was killed by signal {-int(exc.exit_code)}: {_tail(_text(exc.stderr))}"
            ) from exc
        except sh.ErrorReturnCode as exc:
            message = _tail(_text(exc.stderr)) or _tail(_text(exc.stdout)) or "(no message)"
            raise errors.HardwareError(operation, device, f"{tool} exited with {exc.exit_code}: {message}") from exc
        except OSError as exc:
            raise errors.HardwareError(operation, device, f"cannot run {tool}: {exc.strerror or exc}") from exc
        return ToolOutput(stdout=_text(result.stdout), stderr=_text(result.stderr))
