"""The operator's settings, from the environment (the chart sets them), with the documented defaults.

Why a module of its own: every knob of the process is here, read once at start, so `bootstrap` and tests
build the same `Settings` record; a bad value is an error naming the variable, never a crash later. The
variables go through the same converter as the node agents' settings (`services._agent.settings`), so every
bad or missing one is reported at once, by name.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import attrs

from metax_core import release
from metax_core.cluster import image_refs, rbac
from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec import model as spec
from metax_core.wire import agent_env, meta, operator_env
from services._agent import settings as env_settings
from services._agent.settings import env

#: The smallest values that make sense, by variable: a resync more often than every 10 minutes would be
#: polling (issue 11), and a driver pod gets at least a second to become Ready.
MINIMUMS = {operator_env.RESYNC_SECONDS: 600.0, operator_env.DRIVER_READY_TIMEOUT: 1.0}


@attrs.frozen
class Settings:
    namespace: str = attrs.field(default=spec.NAMESPACE, metadata=env(agent_env.NAMESPACE))
    """METAX_NAMESPACE: where the components, ConfigMaps and the Lease live."""
    kubeconfig: str | None = attrs.field(default=None, metadata=env("KUBECONFIG"))
    """KUBECONFIG: a kubeconfig file; unset inside a pod (in-cluster configuration)."""
    identity: str = attrs.field(factory=socket.gethostname)
    """METAX_IDENTITY (else POD_NAME, else the host name): this replica's name in the Lease and in Events."""
    leader_election: bool = attrs.field(default=True, metadata=env(operator_env.LEADER_ELECTION))
    """METAX_LEADER_ELECTION: false only for a single replica in development."""
    lease_name: str = rbac.OPERATOR_LEASE
    resync_seconds: float = attrs.field(default=600.0, metadata=env(operator_env.RESYNC_SECONDS))
    """METAX_RESYNC_SECONDS: a full reconcile at least this often even if no watch fires (>= 600)."""
    version: str = attrs.field(factory=release.running, metadata=env("METAX_COMPONENT_VERSION"))
    """METAX_COMPONENT_VERSION: the component images' tag (default: this operator's own release)."""
    driver_ready_timeout: float = attrs.field(default=600.0, metadata=env(operator_env.DRIVER_READY_TIMEOUT))
    """METAX_DRIVER_READY_TIMEOUT: seconds a new driver pod may take to become Ready before it counts as failed."""
    uninstall_timeout: float = attrs.field(default=180.0, metadata=env("METAX_UNINSTALL_TIMEOUT"))
    """METAX_UNINSTALL_TIMEOUT: seconds the finalizer waits for the nodes' agents to undo their host changes."""
    image_digests: str = attrs.field(default="", metadata=env(image_refs.DIGESTS_ENV))
    """METAX_IMAGE_DIGESTS: the release's image digests (chart value operator.imageDigests, `image_refs`), a JSON
    object; every component image is then pinned by digest. Read with `image_refs.decode_digests`."""
    host_path_prefix: str = attrs.field(default="", metadata=env("METAX_TEST_HOST_PATH_PREFIX"))
    """METAX_TEST_HOST_PATH_PREFIX: TEST ONLY (docs/realnode.md): put in front of every hostPath of the node agents,
    so that a test node's agents see a fake GPU host; "" (the default) renders the real paths."""
    crash_loop_restarts: int = 3
    """A driver pod whose container restarted this often (or waits in CrashLoopBackOff) has failed."""
    progress_pace: float = 1.0
    """Seconds a reconcile for reported progress (pod changes, a status write, its own included) waits, so that the
    events of an install or a rollout (thousands of pod changes) make one reconcile a second, not one after
    another: at 500 kwok nodes the install made 225 reconciles and 216 status writes in 123 s. Changes to what the
    operator wants or owns (spec, labels, a deletion) reconcile at once. While reconciles take long, progress waits
    longer (`metax_core.cluster.wakes.progress_delay`)."""
    backoff_base: float = 0.5
    backoff_max: float = 300.0
    field_manager: str = meta.OPERATOR_FIELD_MANAGER


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings the environment gives; InvalidSpec names every bad variable at once."""
    e = os.environ if environ is None else environ
    given = {k: v for k, v in e.items() if v != ""}  # an empty variable means "the default", as the chart may render
    identity = given.get(operator_env.IDENTITY) or given.get(operator_env.POD_NAME) or socket.gethostname()
    errors: list[FieldError] = []
    try:
        loaded = env_settings.load(Settings, given, identity=identity)
    except InvalidSpec as exc:
        errors += exc.errors
        loaded = None
    for name, minimum in MINIMUMS.items():
        if name in given and loaded is not None:
            value = loaded.resync_seconds if name == operator_env.RESYNC_SECONDS else loaded.driver_ready_timeout
            if value < minimum:
                errors.append(FieldError(name, f"must be at least {minimum:g} seconds, got {given[name]!r}"))
    if loaded is not None:
        try:
            image_refs.decode_digests(loaded.image_digests)
        except InvalidSpec as exc:
            errors += exc.errors
    if errors or loaded is None:
        raise InvalidSpec(errors)
    return loaded
