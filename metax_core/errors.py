"""One error tree for the whole operator.

Adapters turn library exceptions (ApiException, ErrorReturnCode, OSError, ...) into these, chained with
``raise ... from exc``, so callers above a port never depend on the library behind it. Errors carry fields,
not just text: the CLI prints them, the operator copies them into status conditions and events.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs


class MetaxError(Exception):
    """Base of every error the operator raises on purpose."""


@attrs.frozen
class FieldError:
    """One problem with one field of a document: where it is and what is allowed there."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidSpec(MetaxError):
    """A document (ClusterOperator spec, ConfigMap data, CLI input) has one or more bad fields.

    All problems are collected, so an administrator fixes the document in one round.
    """

    def __init__(self, errors: Iterable[FieldError]) -> None:
        self.errors: tuple[FieldError, ...] = tuple(errors)
        super().__init__("; ".join(str(e) for e in self.errors) or "invalid document")


class PortError(MetaxError):
    """An adapter could not do what a port asked. Subclasses name the failing operation."""


class HardwareError(PortError):
    """A hardware operation failed: names the device, the operation and the kernel's or tool's message."""

    def __init__(self, operation: str, device: str | None, detail: str) -> None:
        self.operation = operation
        self.device = device
        self.detail = detail
        where = f" on {device}" if device else ""
        super().__init__(f"{operation}{where} failed: {detail}")


class ClusterError(PortError):
    """A Kubernetes API operation failed after retries: names the object, the verb and the server's reason."""

    def __init__(self, verb: str, target: str, detail: str, status: int | None = None) -> None:
        self.verb = verb
        self.target = target
        self.detail = detail
        self.status = status
        code = f" ({status})" if status is not None else ""
        super().__init__(f"{verb} {target} failed{code}: {detail}")


class Conflict(ClusterError):
    """The object changed under us (HTTP 409) and retries did not resolve it."""


class NotFound(ClusterError):
    """The object does not exist (HTTP 404)."""


class Expired(ClusterError):
    """The version a watch asked to resume from is no longer kept (HTTP 410): list again, then watch from there."""


class NotServed(ClusterError):
    """The API server does not serve the kind at all (discovery has no such resource), so no object of it exists:
    e.g. ``resource.k8s.io/v1`` DeviceClasses on a Kubernetes older than 1.34."""
