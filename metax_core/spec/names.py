"""The Kubernetes and OCI syntax of names the spec carries into rendered objects: label keys and values,
DNS names, image references.

Why: whatever the validator accepts, the operator renders, and the API server must create. A toleration key,
a nodeSelector entry, an ExternalName or an image that the API server (or the kubelet) would refuse must be
refused here first, with the field's path. The rules are the API server's own (apimachinery
``IsQualifiedName``, ``IsValidLabelValue``, ``IsDNS1123Subdomain``) and the distribution reference grammar;
every pattern is matched with ``fullmatch`` and uses ASCII classes only.
"""

from __future__ import annotations

import re
from typing import Final

_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_LABEL_NAME = re.compile(_NAME_PART)

# The distribution reference grammar (domain/path:tag@digest), without the digest-only short forms.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]{{1,5}})?"
TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REPOSITORY = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_REFERENCE = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{TAG})?(?:@{_DIGEST})?")
_REGISTRY = re.compile(rf"{_DOMAIN}(?:/{_PATH_COMPONENT})*")
_TAG = re.compile(TAG)
MAX_REFERENCE = 255


def dns_subdomain_problem(value: str) -> str | None:
    """None when ``value`` is a DNS-1123 subdomain (lowercase, at most 253 characters), else what is wrong."""
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        return "must be a DNS name: lowercase letters, digits, '-' and '.', at most 253 characters"
    return None


def dns_label_problem(value: str) -> str | None:
    """None when ``value`` is a DNS-1123 label (a namespace name: lowercase, at most 63 characters, no dots)."""
    if len(value) > 63 or not _DNS_LABEL_RE.fullmatch(value):
        return "must be a DNS label: lowercase letters, digits and '-', at most 63 characters (a namespace name)"
    return None


def label_key_problem(key: str) -> str | None:
    """None when ``key`` is a valid label (or taint/toleration) key: ``[prefix/]name``."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or dns_subdomain_problem(prefix)):
        return "must be a label key: an optional DNS prefix and '/', then a name"
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            "must be a label key: a name of at most 63 letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit (with an optional 'prefix/')"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """None when ``value`` is a valid label (or toleration) value: empty, or a name of at most 63 characters."""
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        return (
            "must be a label value: empty, or at most 63 letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def image_problem(reference: str) -> str | None:
    """None when ``reference`` is a valid image reference (``[registry/]path[:tag][@digest]``)."""
    if len(reference) > MAX_REFERENCE or not _REFERENCE.fullmatch(reference):
        return "must be an image reference like registry.example.com/project/name:tag (lowercase path)"
    return None


def repository_problem(repository: str) -> str | None:
    """None when ``repository`` (no tag) is a valid image repository name."""
    if len(repository) > MAX_REFERENCE or not _REPOSITORY.fullmatch(repository):
        return "must be an image name: lowercase letters, digits and separators, like maca-c500"
    return None


REGISTRY_EXAMPLE: Final = "registry.example.com/metax"
"""The example every registry error shows (docs/images.md, "Registry")."""


def registry_problem(registry: str) -> str | None:
    """None when ``registry`` is ``HOST[:PORT][/PROJECT...]`` whose first component names a registry host.

    R-RELEASE, "no silent default registry": an empty registry, or one whose first component is no host
    (``metax``), would make every image a Docker Hub name (``docker.io/library/metax-operator``) that a node pulls
    without a word; both are refused, with the fix in the message."""
    if not registry:
        return f'is required: the registry every image is pulled from, like "{REGISTRY_EXAMPLE}" (there is no default)'
    if len(registry) > MAX_REFERENCE or not _REGISTRY.fullmatch(registry):
        return f'must be a registry path like "{REGISTRY_EXAMPLE}" (no scheme, no trailing /)'
    if not names_registry(registry.partition("/")[0]):
        return (
            f'must start with a registry host (a name with a dot, a port, or "localhost"), like '
            f'"{REGISTRY_EXAMPLE}" or "docker.io/{registry}": "{registry.partition("/")[0]}" alone would be read as '
            "a Docker Hub name"
        )
    return None


def tag_problem(tag: str) -> str | None:
    if not _TAG.fullmatch(tag):
        return "must be a valid image tag ([A-Za-z0-9_.-], not starting with '.' or '-', at most 128)"
    return None


def names_registry(first_component: str) -> bool:
    """Whether an image reference's first path component is a registry host (the docker rule)."""
    return "." in first_component or ":" in first_component or first_component == "localhost"
