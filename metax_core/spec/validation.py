"""Turning a submitted document into a valid spec, or into every reason it is not valid.

`parse` is what the CLI's ``validate``, the admission webhook and the operator call: it accepts a whole
ClusterOperator object or a bare spec/values mapping, structures it (`metax_core.spec.converter`) and then checks
the rules that span fields (payload version required unless Never, upgradePolicy shape per Table 3.11,
vfioConfig regexes, image tags, Service ports). All problems come back together in one `InvalidSpec`.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Any

import attrs

from metax_core import versions
from metax_core.errors import FieldError, InvalidSpec
from metax_core.spec import converter, vfio_config
from metax_core.spec import model as spec

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def spec_document(document: object) -> Mapping[str, Any]:
    """The spec part of ``document``: a ClusterOperator object's ``spec``, or the mapping itself (values)."""
    if not isinstance(document, Mapping):
        raise InvalidSpec([FieldError("", "the document must be a mapping (a ClusterOperator or a spec)")])
    if "kind" not in document and "apiVersion" not in document:
        return document
    errors = []
    expected_api = f"{spec.API_GROUP}/{spec.API_VERSION}"
    if document.get("kind") != spec.KIND:
        errors.append(FieldError("kind", f"must be {spec.KIND}, got {document.get('kind')!r}"))
    if document.get("apiVersion") != expected_api:
        errors.append(FieldError("apiVersion", f"must be {expected_api}, got {document.get('apiVersion')!r}"))
    metadata = document.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if name is not None and name != spec.OBJECT_NAME:
        errors.append(
            FieldError("metadata.name", f"must be {spec.OBJECT_NAME!r}: the operator reconciles only that object")
        )
    body = document.get("spec", {})
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        errors.append(FieldError("spec", "must be a mapping"))
    if errors:
        raise InvalidSpec(errors)
    return typing.cast(Mapping[str, Any], body)


def parse(document: object) -> spec.ClusterOperatorSpec:
    """A valid spec from ``document``, or InvalidSpec listing every problem (paths relative to spec).

    When some top-level sections have type errors, the cross-field rules still run on the sections that
    structured cleanly, so one round of fixes is enough.
    """
    body = spec_document(document)
    try:
        parsed = converter.structure(body, spec.ClusterOperatorSpec)
    except InvalidSpec as exc:
        partial, broken = _structure_sections(body)
        semantic = [e for e in semantic_errors(partial) if _section(e.path) not in broken]
        raise InvalidSpec([*exc.errors, *semantic]) from exc
    errors = semantic_errors(parsed)
    if errors:
        raise InvalidSpec(errors)
    return parsed


def _section(path: str) -> str:
    return path.split(".", 1)[0].split("[", 1)[0]


def _structure_sections(body: Mapping[str, Any]) -> tuple[spec.ClusterOperatorSpec, set[str]]:
    """The spec built from the sections that structure on their own (defaults elsewhere), and the broken keys."""
    good: dict[str, Any] = {}
    broken = {key for key in body if isinstance(key, str)}
    for field in attrs.fields(attrs.resolve_types(spec.ClusterOperatorSpec)):
        key = converter.camel_case(field.name)
        if key not in body:
            continue
        try:
            good[field.name] = converter.structure(body[key], typing.cast(type, field.type), path=key)
            broken.discard(key)
        except InvalidSpec:
            pass
    return spec.ClusterOperatorSpec(**good), broken


def semantic_errors(s: spec.ClusterOperatorSpec) -> list[FieldError]:
    errors: list[FieldError] = []
    errors += _global_errors(s)
    errors += _driver_errors(s.driver)
    errors += upgrade_policy_errors(s.driver.upgrade_policy)
    errors += vfio_config.check_entries(s.vfio_manager.vfio_config)
    errors += _maca_errors(s.maca)
    errors += _exporter_errors(s.exporter)
    errors += _device_errors(s.gpu_device)
    for key, component in _components(s):
        template = component.pod_template_spec
        if template is not None and template.spec.tolerations is not None:
            errors += _toleration_errors(template.spec.tolerations, f"{key}.podTemplateSpec.spec.tolerations")
    return errors


def _components(s: spec.ClusterOperatorSpec) -> list[tuple[str, spec.ComponentSpec]]:
    return [
        ("gpuDevice", s.gpu_device),
        ("gpuLabel", s.gpu_label),
        ("driver", s.driver),
        ("vfioManager", s.vfio_manager),
        ("maca", s.maca),
        ("runtime", s.runtime),
        ("exporter", s.exporter),
        ("topo", s.topo),
        ("gpuScheduler", s.gpu_scheduler),
    ]


def _global_errors(s: spec.ClusterOperatorSpec) -> list[FieldError]:
    errors = []
    if "://" in s.registry or s.registry.endswith("/"):
        errors.append(
            FieldError("registry", 'must be a registry path like "DOMAIN/PROJECT" (no scheme, no trailing /)')
        )
    if s.tolerations is not None:
        errors += _toleration_errors(s.tolerations, "tolerations")
    if s.pod_template_spec is not None and s.pod_template_spec.spec.tolerations is not None:
        errors += _toleration_errors(s.pod_template_spec.spec.tolerations, "podTemplateSpec.spec.tolerations")
    return errors


def _toleration_errors(tolerations: tuple[spec.Toleration, ...], path: str) -> list[FieldError]:
    errors = []
    for i, t in enumerate(tolerations):
        here = f"{path}[{i}]"
        if t.operator is spec.TolerationOperator.EXISTS and t.value:
            errors.append(FieldError(f"{here}.value", "must be empty when operator is Exists"))
        if not t.key and t.operator is not spec.TolerationOperator.EXISTS:
            errors.append(FieldError(f"{here}.operator", "must be Exists when key is empty"))
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
    if d.payload.version and not _TAG.match(d.payload.version):
        errors.append(FieldError("driver.payload.version", "must be a valid image tag ([A-Za-z0-9_.-], max 128)"))
    if not d.payload.name:
        errors.append(FieldError("driver.payload.name", "must not be empty"))
    return errors


def upgrade_policy_errors(p: spec.UpgradePolicy, path: str = "driver.upgradePolicy") -> list[FieldError]:
    """Table 3.11's rules (R-WEBHOOK): shapes and ranges of every option, and steps that can finish."""
    errors: list[FieldError] = []

    def percent_at_most_100(value: spec.IntOrPercent, where: str) -> None:
        if value.percent and value.value > 100:
            errors.append(FieldError(where, f"must be at most 100%, got {value}"))

    percent_at_most_100(p.max_parallel, f"{path}.maxParallel")
    percent_at_most_100(p.max_unavailable, f"{path}.maxUnavailable")
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
    for i, image in enumerate(m.payload.images):
        here = f"maca.payload.images[{i}]"
        last = image.rsplit("/", 1)[-1]
        if "@" in last or ":" not in last:
            errors.append(
                FieldError(
                    here, f'must name an explicit tag, like "maca-c500:2.18.0.3-ubuntu18.04-amd64", got {image!r}'
                )
            )
            continue
        tag = last.split(":", 1)[1]
        if not _TAG.match(tag):
            errors.append(FieldError(here, f"has an invalid tag {tag!r}"))
        elif versions.version_of_tag(tag) is None:
            errors.append(FieldError(here, f"tag must start with the MXMACA version (e.g. 2.18.0.3-...), got {tag!r}"))
    return errors


def _exporter_errors(e: spec.Exporter) -> list[FieldError]:
    errors = []
    port = e.service.port
    if port is not None:
        if e.service.type not in (spec.ServiceType.NODE_PORT, spec.ServiceType.LOAD_BALANCER):
            errors.append(FieldError("exporter.service.port", "is only used when type is NodePort or LoadBalancer"))
        elif not 1 <= port <= 65535:
            errors.append(FieldError("exporter.service.port", f"must be between 1 and 65535, got {port}"))
    is_external = e.service.type is spec.ServiceType.EXTERNAL_NAME
    if is_external and not e.service.external_name:
        errors.append(FieldError("exporter.service.externalName", "is required when type is ExternalName"))
    if not is_external and e.service.external_name:
        errors.append(FieldError("exporter.service.externalName", "is only used when type is ExternalName"))
    return errors


def _device_errors(g: spec.GpuDevice) -> list[FieldError]:
    errors = []
    if g.healthy_interval < 0:
        errors.append(FieldError("gpuDevice.healthyInterval", "must be 0 (off) or a positive number of seconds"))
    if g.sgpu_shares < 1:
        errors.append(FieldError("gpuDevice.sgpuShares", "must be at least 1"))
    return errors
