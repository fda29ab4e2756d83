"""The operator's settings, from the environment (the chart sets them), with the documented defaults.

Why a module of its own: every knob of the process is here, read once at start, so `bootstrap` and tests
build the same `Settings` record; a bad value is an error naming the variable, never a crash later.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import attrs

from metax_core.errors import MetaxError
from metax_core.spec import model as spec


class BadSetting(MetaxError):
    """An environment variable has a value the operator cannot use."""


@attrs.frozen
class Settings:
    namespace: str = spec.NAMESPACE
    """METAX_NAMESPACE: where the components, ConfigMaps and the Lease live."""
    kubeconfig: str | None = None
    """KUBECONFIG: a kubeconfig file; unset inside a pod (in-cluster configuration)."""
    identity: str = attrs.field(factory=socket.gethostname)
    """METAX_IDENTITY (else POD_NAME, else the host name): this replica's name in the Lease and in Events."""
    leader_election: bool = True
    """METAX_LEADER_ELECTION: false only for a single replica in development."""
    lease_name: str = "metax-operator-leader"
    resync_seconds: float = 600.0
    """METAX_RESYNC_SECONDS: a full reconcile at least this often even if no watch fires (>= 600)."""
    version: str = "0.1.0"
    """METAX_COMPONENT_VERSION: the component images' tag."""
    driver_ready_timeout: float = 600.0
    """METAX_DRIVER_READY_TIMEOUT: seconds a new driver pod may take to become Ready before it counts as failed."""
    crash_loop_restarts: int = 3
    """A driver pod whose container restarted this often (or waits in CrashLoopBackOff) has failed."""
    backoff_base: float = 0.5
    backoff_max: float = 300.0
    field_manager: str = "metax-operator"


def _float(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise BadSetting(f"{name} must be a number of seconds, got {raw!r}") from exc
    if value < minimum:
        raise BadSetting(f"{name} must be at least {minimum:g}, got {raw!r}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise BadSetting(f"{name} must be true or false, got {raw!r}")


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    e = os.environ if env is None else env
    identity = e.get("METAX_IDENTITY") or e.get("POD_NAME") or socket.gethostname()
    return Settings(
        namespace=e.get("METAX_NAMESPACE") or spec.NAMESPACE,
        kubeconfig=e.get("KUBECONFIG") or None,
        identity=identity,
        leader_election=_bool(e, "METAX_LEADER_ELECTION", True),
        resync_seconds=_float(e, "METAX_RESYNC_SECONDS", 600.0, 600.0),
        version=e.get("METAX_COMPONENT_VERSION") or "0.1.0",
        driver_ready_timeout=_float(e, "METAX_DRIVER_READY_TIMEOUT", 600.0, 1.0),
    )
