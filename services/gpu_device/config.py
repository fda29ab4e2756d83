"""gpu-device's settings, read once from the environment the operator gives the DaemonSet.

Every variable has a production default, so the DaemonSet only sets what differs (NODE_NAME always, from
the downward API). A bad value stops the agent at start with a message naming the variable: a device plugin
running on a misread interval is worse than one that does not start.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

import attrs

from metax_core.errors import FieldError, InvalidSpec
from metax_core.node import devices, readiness

DEFAULT_REQUIRED = ("gpu-label", "container-runtime", "maca", "driver")


@attrs.frozen
class Settings:
    node_name: str
    host_root: pathlib.Path = pathlib.Path("/")
    """The host's root as the container sees it; every host path below is taken under it."""
    plugin_dir: str = "/var/lib/kubelet/device-plugins"
    cdi_dir: str = "/var/run/cdi"
    healthy_interval: float = 5.0
    """Seconds between health checks (chart gpuDevice.healthyInterval); 0 disables them."""
    sgpu_shares: int = devices.DEFAULT_SHARES
    required_components: tuple[str, ...] = DEFAULT_REQUIRED
    label_interval: float = 5.0
    readiness_interval: float = 2.0
    inventory_interval: float = 10.0
    readiness_max_age: float | None = None
    probe_interval: float = 10.0
    tick: float = 0.5
    """How often the loop wakes to look at kubelet's socket and at what has come due."""
    cdi_enabled: bool = True
    health_failure_threshold: int = 3

    def host_path(self, path: str) -> pathlib.Path:
        return self.host_root / path.lstrip("/")


_FLOATS = {
    "METAX_HEALTHY_INTERVAL": "healthy_interval",
    "METAX_LABEL_INTERVAL": "label_interval",
    "METAX_READINESS_INTERVAL": "readiness_interval",
    "METAX_INVENTORY_INTERVAL": "inventory_interval",
    "METAX_READINESS_MAX_AGE": "readiness_max_age",
    "METAX_PROBE_INTERVAL": "probe_interval",
}
_PATHS = {"METAX_DEVICE_PLUGIN_DIR": "plugin_dir", "METAX_CDI_DIR": "cdi_dir"}
_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def from_env(env: Mapping[str, str]) -> Settings:
    """Settings from environment variables; InvalidSpec lists every bad one."""
    errors: list[FieldError] = []
    values: dict[str, object] = {}
    node = env.get("NODE_NAME", "").strip()
    if not node:
        errors.append(FieldError("NODE_NAME", "must be set (downward API: spec.nodeName)"))
    if root := env.get("METAX_HOST_ROOT"):
        values["host_root"] = pathlib.Path(root)
    for var, attr in _PATHS.items():
        if var in env:
            if not env[var].startswith("/"):
                errors.append(FieldError(var, f"must be an absolute host path, got {env[var]!r}"))
            values[attr] = env[var]
    for var, attr in _FLOATS.items():
        if var in env:
            try:
                number = float(env[var])
            except ValueError:
                number = -1.0
            if number < 0 or number != number:
                errors.append(FieldError(var, f"must be a number of seconds >= 0, got {env[var]!r}"))
            values[attr] = number
    if "METAX_SGPU_SHARES" in env:
        text = env["METAX_SGPU_SHARES"]
        if not text.isdigit() or not 1 <= int(text) <= 1024:
            errors.append(FieldError("METAX_SGPU_SHARES", f"must be an integer from 1 to 1024, got {text!r}"))
        else:
            values["sgpu_shares"] = int(text)
    if "METAX_CDI" in env:
        flag = _BOOLS.get(env["METAX_CDI"].strip().lower())
        if flag is None:
            errors.append(FieldError("METAX_CDI", f"must be true or false, got {env['METAX_CDI']!r}"))
        values["cdi_enabled"] = bool(flag)
    if readiness.REQUIRED_ENV in env:
        try:
            values["required_components"] = readiness.parse_required(env[readiness.REQUIRED_ENV])
        except InvalidSpec as exc:
            errors.extend(exc.errors)
    if errors:
        raise InvalidSpec(errors)
    if values.get("readiness_max_age") == 0.0:
        values["readiness_max_age"] = None
    return Settings(node_name=node, **values)  # type: ignore[arg-type]
