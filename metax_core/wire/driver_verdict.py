"""driver-manager's verdict that the driver it was asked to load cannot load, on its Node, for the operator's
driver rollout (R-ROLLOUT, R-DRIVER; issue 41 item 1, "fail fast"; docs/rollout.md "Fail fast").

Why it exists: driver-manager knows at once when the wanted driver cannot load (the kernel refused the module,
the payload has no module for the running kernel, an install step failed), but the operator only saw a driver
pod that stays not-Ready, and counted the canary as failed after ``METAX_DRIVER_READY_TIMEOUT`` (600 s by
default) while the canary node advertised no GPU. driver-manager now writes this verdict into the annotation
`ANNOTATION` on its own Node (the node-bound admission policy lets it write only there); the operator's node
watch sees it within a second and counts that node's driver pod failed (`applies_to`). The timeout stays for
silence only (a hang).

The format has one owner, this module: driver-manager calls `encode`, the operator `decode`, and a round trip
test checks that what one writes the other reads. A verdict is about the pod that wrote it and names it (the
container's ``HOSTNAME``, which the runtime sets to the pod's name), so a verdict left by an earlier pod, say the
refused canary's, never fails the pod that replaced it, even one started in the same second (a time rule did:
the rollback's pod was counted failed once). A verdict without a pod name counts for a pod started no later
than it was reached (``status.startTime``, the node's clock). driver-manager removes the annotation once a
driver loads.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Mapping

import attrs

from metax_core.wire import meta

ANNOTATION = meta.PREFIX + "driver.verdict"
"""On a GPU node: driver-manager's `Verdict` (JSON) while the wanted driver cannot load; absent otherwise."""
MESSAGE_LIMIT = 400
"""Characters of the reason kept: the operator keeps this annotation's value in its node cache (P3)."""


class Cause(enum.Enum):
    """Why the wanted driver cannot load."""

    LOAD_REFUSED = "LoadRefused"
    """The kernel refused the module, or an install step of the payload failed (``DriverLoadFailed``)."""
    KERNEL_NOT_COVERED = "KernelNotCovered"
    """The payload holds no module built for the running kernel."""


def _bounded(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 1] + "…"


def _to_the_second(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(microsecond=0)


@attrs.frozen
class Verdict:
    """The wanted driver cannot load on this node, since `at`."""

    cause: Cause
    version: str
    """The driver version that cannot load."""
    message: str = attrs.field(converter=_bounded)
    at: dt.datetime = attrs.field(converter=_to_the_second)
    """When it was reached, to the second (the precision of the pod's ``startTime`` it is compared with)."""
    pod: str = ""
    """The driver pod whose driver-manager reached it (empty: not known)."""

    def describe(self) -> str:
        return f"{self.cause.value}: metax {self.version} cannot load: {self.message}"


def encode(verdict: Verdict) -> str:
    """The annotation's value."""
    return json.dumps(
        {
            "cause": verdict.cause.value,
            "version": verdict.version,
            "message": verdict.message,
            "at": verdict.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            **({"pod": verdict.pod} if verdict.pod else {}),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def decode(text: str) -> Verdict:
    """The `Verdict` an `encode` value stands for; ValueError naming the field for anything else."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ANNOTATION}: not JSON ({exc.msg})") from exc
    if not isinstance(document, Mapping):
        raise ValueError(f"{ANNOTATION}: must be a JSON object")
    fields: dict[str, str] = {}
    for key in ("cause", "version", "message", "at"):
        value = document.get(key)
        if not isinstance(value, str):
            raise ValueError(f"{ANNOTATION}.{key}: must be a string")
        fields[key] = value
    try:
        cause = Cause(fields["cause"])
    except ValueError:
        allowed = ", ".join(c.value for c in Cause)
        raise ValueError(f"{ANNOTATION}.cause: {fields['cause']!r} is not one of {allowed}") from None
    try:
        at = dt.datetime.fromisoformat(fields["at"].replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{ANNOTATION}.at: {fields['at']!r} is not an RFC 3339 time") from None
    if at.tzinfo is None:
        raise ValueError(f"{ANNOTATION}.at: {fields['at']!r} has no time zone")
    pod = document.get("pod", "")
    if not isinstance(pod, str):
        raise ValueError(f"{ANNOTATION}.pod: must be a string")
    return Verdict(cause, fields["version"], fields["message"], at, pod)


def applies_to(verdict: Verdict, pod_name: str, pod_started: dt.datetime | None) -> bool:
    """Whether the verdict is the driver pod's own: it names the pod; without a name, it was reached once the pod
    had started (a pod not started yet has written none)."""
    if verdict.pod:
        return verdict.pod == pod_name
    return pod_started is not None and verdict.at >= _to_the_second(pod_started)
