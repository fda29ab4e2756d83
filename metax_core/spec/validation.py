"""Turning a submitted document into a valid spec, or into every reason it is not valid.

`parse` is what the CLI's ``validate``, the admission webhook and the operator call: it accepts a whole
ClusterOperator object or a bare spec/values mapping (`metax_core.spec.envelope`), structures it
(`metax_core.spec.converter`) and then checks the rules that span fields (payload version required unless Never,
upgradePolicy shape per Table 3.11, vfioConfig regexes, image tags, Service ports). All problems come back
together in one `InvalidSpec`.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import attrs

from metax_core import versions
from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec import affinity, converter, envelope, names, vfio_config
from metax_core.spec import model as spec


def parse(document: object) -> spec.ClusterOperatorSpec:
    """A valid spec from ``document``, or InvalidSpec listing every problem (paths relative to spec).

    A type error never hides another problem: when some fields are broken, the rules that span fields still
    run on everything that structured (broken fields take their defaults, and rules about them are dropped).
    """
    body = envelope.spec_document(document)
    try:
        parsed = converter.structure(body, spec.ClusterOperatorSpec)
    except InvalidSpec as exc:
        broken = tuple(e.path for e in exc.errors)
        partial = salvage(body, spec.ClusterOperatorSpec, "")
        semantic = [] if partial is None else semantic_errors(partial)
        raise InvalidSpec([*exc.errors, *(e for e in semantic if not _under_any(e.path, broken))]) from exc
    errors = semantic_errors(parsed)
    if errors:
        raise InvalidSpec(errors)
    return parsed


def _under_any(path: str, broken: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``broken`` or inside one (by whole path components), or contains one."""
    for b in broken:
        shorter, longer = sorted((path, b), key=len)
        if not shorter or (longer.startswith(shorter) and longer[len(shorter) : len(shorter) + 1] in ("", ".", "[")):
            return True
    return False


def salvage(document: object, cl: type, path: str) -> Any:
    """The ``cl`` record built from every part of ``document`` that structures, defaults for the rest;
    None when even that is impossible (a broken required field)."""
    try:
        return converter.structure(document, cl, path=path)
    except InvalidSpec:
        pass
    if not isinstance(document, Mapping):
        return None
    good: dict[str, Any] = {}
    for field in attrs.fields(attrs.resolve_types(cl)):
        key = converter.camel_case(field.name)
        if key not in document:
            continue
        here = f"{path}.{key}" if path else key
        field_type = typing.cast(type, field.type)
        if attrs.has(field_type):
            value = salvage(document[key], field_type, here)
        else:
            try:
                value = converter.structure(document[key], field_type, path=here)
            except InvalidSpec:
                value = None
        if value is not None:
            good[field.name] = value
        elif field.default is attrs.NOTHING:
            return None
    try:
        return cl(**good)
    except (TypeError, ValueError):
        return None


def semantic_errors(s: spec.ClusterOperatorSpec) -> list[FieldError]:
    errors: list[FieldError] = []
    errors += _global_errors(s)
    errors += _driver_errors(s.driver)
    errors += upgrade_policy_errors(s.driver.upgrade_policy)
    errors += agent_update_errors(s.agent_update)
    errors += vfio_config.check_entries(s.vfio_manager.vfio_config)
    errors += _maca_errors(s.maca)
    errors += _exporter_errors(s.exporter)
    errors += _runtime_errors(s.runtime)
    errors += _network_policy_errors(s.exporter.network_policy, "exporter.networkPolicy")
    errors += _network_policy_errors(s.gpu_scheduler.network_policy, "gpuScheduler.networkPolicy")
    for key, component in _components(s):
        if component.pod_template_spec is not None:
            errors += _template_errors(component.pod_template_spec, f"{key}.podTemplateSpec")
        if component.resources is not None:
            errors += _resources_errors(component.resources, f"{key}.resources")
    return errors


def _components(s: spec.ClusterOperatorSpec) -> list[tuple[str, spec.ComponentSpec]]:
    """Every per-component section with its key, in the spec's order (the catalogue names each by its key,
    `metax_core.components.ComponentInfo.spec_field`; a test holds the two equal)."""
    sections = typing.get_args(spec.ComponentSpec)
    return [
        (converter.camel_case(f.name), value)
        for f in attrs.fields(type(s))
        if isinstance(value := getattr(s, f.name), sections)
    ]


def _global_errors(s: spec.ClusterOperatorSpec) -> list[FieldError]:
    errors = []
    if problem := names.registry_problem(s.registry):
        errors.append(FieldError("registry", problem))
    for i, secret in enumerate(s.image_pull_secrets):
        if problem := names.dns_subdomain_problem(secret):
            errors.append(FieldError(f"imagePullSecrets[{i}]", f"{problem} (the name of a Secret)"))
    if s.tolerations is not None:
        errors += _toleration_errors(s.tolerations, "tolerations")
    if s.pod_template_spec is not None:
        errors += _template_errors(s.pod_template_spec, "podTemplateSpec")
    return errors


def _template_errors(template: spec.PodTemplateSpec, path: str) -> list[FieldError]:
    """What the API server would refuse in the pod template the workloads are rendered with."""
    errors = []
    pod = template.spec
    if pod.tolerations is not None:
        errors += _toleration_errors(pod.tolerations, f"{path}.spec.tolerations")
    for key, value in (pod.node_selector or {}).items():
        problem = names.label_key_problem(key) or names.label_value_problem(value)
        if problem:
            errors.append(FieldError(f"{path}.spec.nodeSelector.{key}", problem))
    if pod.affinity is not None:
        errors += affinity.errors(pod.affinity, f"{path}.spec.affinity")
    return errors


def _toleration_errors(tolerations: tuple[spec.Toleration, ...], path: str) -> list[FieldError]:
    errors = []
    for i, t in enumerate(tolerations):
        here = f"{path}[{i}]"
        if t.operator is spec.TolerationOperator.EXISTS and t.value:
            errors.append(FieldError(f"{here}.value", "must be empty when operator is Exists"))
        if not t.key and t.operator is not spec.TolerationOperator.EXISTS:
            errors.append(FieldError(f"{here}.operator", "must be Exists when key is empty"))
        if t.key and (problem := names.label_key_problem(t.key)):
            errors.append(FieldError(f"{here}.key", problem))
        if t.value and (problem := names.label_value_problem(t.value)):
            errors.append(FieldError(f"{here}.value", problem))
        if t.toleration_seconds is not None and t.effect is not spec.TaintEffect.NO_EXECUTE:
            errors.append(FieldError(f"{here}.tolerationSeconds", "is only allowed with effect NoExecute"))
    return errors


def _driver_errors(d: spec.Driver) -> list[FieldError]:
    errors = []
    needs_payload = (
        d.deploy_policy is not spec.DeployPolicy.NEVER or d.fw_upgrade_policy is spec.FirmwarePolicy.PREFER_CLOUD
    )
    if d.deploy and needs_payload and not d.payload.version:
        errors.append(
            FieldError(
                "driver.payload.version",
                "is required unless driver.deployPolicy is Never (and driver.fwUpgradePolicy is Never)",
            )
        )
    if d.payload.version and (problem := names.tag_problem(d.payload.version)):
        errors.append(FieldError("driver.payload.version", problem))
    if not d.payload.name:
        errors.append(FieldError("driver.payload.name", "must not be empty"))
    elif problem := names.repository_problem(d.payload.name):
        errors.append(FieldError("driver.payload.name", problem))
    if d.payload.registry and (problem := names.registry_problem(d.payload.registry)):
        errors.append(FieldError("driver.payload.registry", problem))
    return errors


def agent_update_errors(a: spec.AgentUpdate, path: str = "agentUpdate.maxUnavailable") -> list[FieldError]:
    """At least one node at a time (Kubernetes refuses a DaemonSet maxUnavailable of 0 without maxSurge)."""
    value = a.max_unavailable
    if value.percent and not 1 <= value.value <= 100:
        return [FieldError(path, f"must be a percentage from 1% to 100%, got {value}")]
    if not value.percent and value.value < 1:
        return [FieldError(path, f"must be at least 1 node, got {value}")]
    return []


def upgrade_policy_errors(p: spec.UpgradePolicy, path: str = "driver.upgradePolicy") -> list[FieldError]:
    """Table 3.11's rules (R-WEBHOOK): shapes and ranges of every option, and steps that can finish."""
    errors: list[FieldError] = []

    def percent_at_most_100(value: spec.IntOrPercent, where: str) -> None:
        if value.percent and value.value > 100:
            errors.append(FieldError(where, f"must be at most 100%, got {value}"))

    percent_at_most_100(p.max_parallel, f"{path}.maxParallel")
    percent_at_most_100(p.max_unavailable, f"{path}.maxUnavailable")
    for key, value in ((p.drain.pod_selector if p.drain else None) or {}).items():
        if problem := names.label_key_problem(key) or names.label_value_problem(value):
            errors.append(FieldError(f"{path}.drain.podSelector.{key}", problem))
    if p.max_failure_threshold < 0:
        errors.append(FieldError(f"{path}.maxFailureThreshold", "must not be negative"))
    previous: dict[bool, int] = {}
    for i, step in enumerate(p.upgrade_steps):
        here = f"{path}.upgradeSteps[{i}]"
        percent_at_most_100(step.replicas, f"{here}.replicas")
        percent_at_most_100(step.toleration, f"{here}.toleration")
        if step.replicas.value == 0:
            errors.append(FieldError(f"{here}.replicas", "must be at least 1 (or 1%)"))
        last = previous.get(step.replicas.percent)
        if last is not None and step.replicas.value < last:
            errors.append(
                FieldError(
                    f"{here}.replicas",
                    "must not be lower than an earlier step's "
                    f"({step.replicas} < {last}{'%' if step.replicas.percent else ''})",
                )
            )
        previous[step.replicas.percent] = step.replicas.value
        if step.pause is True and step.pause_duration is not None:
            errors.append(
                FieldError(
                    f"{here}.pauseDuration",
                    "set either pause: true (wait for an administrator) or pauseDuration (resume by itself), not both",
                )
            )
        if step.pause is False and step.pause_duration is not None:
            errors.append(FieldError(f"{here}.pauseDuration", "has no effect with pause: false; remove one of them"))
    if p.enable_rollout:
        if not p.upgrade_steps:
            errors.append(FieldError(f"{path}.upgradeSteps", "must list at least one step when enableRollout is true"))
        elif p.upgrade_steps[-1].replicas != spec.HUNDRED_PERCENT:
            errors.append(
                FieldError(
                    f"{path}.upgradeSteps[{len(p.upgrade_steps) - 1}].replicas",
                    'the last step must be "100%" so that every node is upgraded',
                )
            )
    return errors


def _maca_errors(m: spec.Maca) -> list[FieldError]:
    errors = []
    if m.payload.registry and (problem := names.registry_problem(m.payload.registry)):
        errors.append(FieldError("maca.payload.registry", problem))
    for i, image in enumerate(m.payload.images):
        here = f"maca.payload.images[{i}]"
        last = image.rsplit("/", 1)[-1]
        if "@" in last or ":" not in last:
            errors.append(
                FieldError(
                    here,
                    'must name an explicit tag, like "maca-c500:2.18.0.3-ubuntu18.04-amd64", '
                    f"got {converter.describe(image)}",
                )
            )
            continue
        tag = last.split(":", 1)[1]
        if problem := names.image_problem(image):
            errors.append(FieldError(here, problem))
        elif versions.version_of_tag(tag) is None:
            errors.append(FieldError(here, f"tag must start with the MXMACA version (e.g. 2.18.0.3-...), got {tag!r}"))
    return errors


def _resources_errors(r: spec.Resources, path: str) -> list[FieldError]:
    """A request above the limit set beside it (the API server would refuse the pod: "must be less than or equal
    to … limit")."""
    errors = []
    for key in ("cpu", "memory"):
        wanted = getattr(r.requests, key) if r.requests is not None else None
        limit = getattr(r.limits, key) if r.limits is not None else None
        if wanted is not None and limit is not None and limit < wanted:
            errors.append(FieldError(f"{path}.requests.{key}", f"{wanted} is above limits.{key} {limit}"))
    return errors


PEER_KEYS = frozenset({"ipBlock", "namespaceSelector", "podSelector"})
PEERS_MAX = 32


def _network_policy_errors(p: spec.NetworkPolicy, path: str) -> list[FieldError]:
    """Each peer a core/v1 NetworkPolicyPeer by its keys (the API server checks their contents)."""
    if p.allowed_from is None:
        return []
    if len(p.allowed_from) > PEERS_MAX:
        return [FieldError(f"{path}.allowedFrom", f"must have at most {PEERS_MAX} items, got {len(p.allowed_from)}")]
    errors = []
    for i, peer in enumerate(p.allowed_from):
        keys = set(peer)
        if not keys or not keys <= PEER_KEYS or ("ipBlock" in keys and len(keys) > 1):
            allowed = "ipBlock alone, or namespaceSelector and/or podSelector"
            errors.append(FieldError(f"{path}.allowedFrom[{i}]", f"must have {allowed}; got {sorted(keys)}"))
    return errors


SOCKET_PATH_MAX = 95
"""The agent reaches the socket as ``/proc/1/root<path>`` (12 more bytes) and a unix socket's path holds 107."""


def _runtime_errors(r: spec.Runtime) -> list[FieldError]:
    if r.socket is None:
        return []
    path = r.socket
    if not path.startswith("/") or "/../" in f"{path}/" or any(c.isspace() or c == "\0" for c in path):
        return [FieldError("runtime.socket", f"must be an absolute path without '..' or spaces, got {path!r}")]
    if len(path.encode()) > SOCKET_PATH_MAX:
        return [
            FieldError(
                "runtime.socket",
                f"must be at most {SOCKET_PATH_MAX} bytes long (the agent reaches it as /proc/1/root{path}, and a "
                "unix socket path holds 107 bytes)",
            )
        ]
    return []


def _exporter_errors(e: spec.Exporter) -> list[FieldError]:
    """The Service's options. A NodePort is any port 1–65535 (the bounds table): which of them are node ports
    is the cluster's ``--service-node-port-range`` (30000–32767 by default), so the API server decides."""
    errors = []
    if e.service.port is not None and e.service.type not in (
        spec.ServiceType.NODE_PORT,
        spec.ServiceType.LOAD_BALANCER,
    ):
        errors.append(FieldError("exporter.service.port", "is only used when type is NodePort or LoadBalancer"))
    is_external = e.service.type is spec.ServiceType.EXTERNAL_NAME
    if is_external and not e.service.external_name:
        errors.append(FieldError("exporter.service.externalName", "is required when type is ExternalName"))
    if not is_external and e.service.external_name:
        errors.append(FieldError("exporter.service.externalName", "is only used when type is ExternalName"))
    if is_external and e.service.external_name:
        problem = names.dns_subdomain_problem(e.service.external_name.removesuffix("."))
        if problem:
            errors.append(FieldError("exporter.service.externalName", problem))
    return errors
