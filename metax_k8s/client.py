"""Talking HTTP to a real kube-apiserver: the authenticated client and the low-level `Api`.

Why raw requests instead of the generated API classes of the `kubernetes` package: the generated models
drop fields they do not know (our CRD, newer API fields), older releases cannot send
``application/apply-patch+yaml``, and the generated call signatures changed between client releases. We
use the package for what it does well (kubeconfig and in-cluster loading, token refresh, TLS, the
connection pool) and speak JSON to the API server ourselves, one method per verb.

`api.Api` is the seam between the port code (objects, nodes, events, lease) and a server. `HttpApi` is the real
one; `metax_k8s.inmemory.InMemoryApiServer` implements the same Protocol in memory. `HttpApi` does not
retry: wrap it in `retry.RetryingApi` (the port classes do). Error bodies and watch streams are decoded by
`metax_k8s.responses`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlencode

import attrs
import urllib3

from metax_core.cluster import pod_security
from metax_core.errors import ClusterError, NotFound, NotServed
from metax_core.ports.cluster import Fields, ObjectList, RawObject, Transform, WatchEvent
from metax_k8s import api, decoding, responses, retry

if TYPE_CHECKING:
    import kubernetes

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for one-shot requests; watches get a read timeout just past their own end."""
LIST_CHUNK = 500
"""Objects per list page (``limit``); a list holds one page of whole objects at a time (see `HttpApi.list`)."""
SERVICE_ACCOUNT_DIR = pod_security.TOKEN_PATH
"""Where a pod finds its ServiceAccount token and the cluster CA (the kubelet mounts them there)."""
KUBECONFIG_EXTRA = "metax-gpu-operator[kubeconfig]"
"""The distribution's extra that brings the `kubernetes` package (not in the images: pods never need it)."""
SERVICE_ACCOUNT_DIR_ENV = "METAX_SERVICEACCOUNT_DIR"
"""Roots the in-cluster files elsewhere: a process node (metax_dev/processnode) runs pods without a mount namespace."""


def api_client(
    kubeconfig: str | os.PathLike[str] | None = None, *, context: str | None = None
) -> kubernetes.client.ApiClient:
    """An ApiClient from ``kubeconfig``; without one, in-cluster config inside a pod, else $KUBECONFIG.

    A configuration that cannot be loaded raises `ClusterError` (verb ``configure``) naming the source.
    The package is imported here, not at module level: node agents reach `HttpApi` through
    `metax_k8s.connect` and never load it (about 20 MiB of resident memory, P8).
    """
    try:
        import kubernetes
    except ImportError as exc:
        raise ClusterError(
            "configure",
            "the Kubernetes API client",
            f"{os.fspath(kubeconfig) if kubeconfig is not None else 'this configuration'} needs the kubernetes "
            f"package's loader (an exec plugin or auth provider): pip install '{KUBECONFIG_EXTRA}'",
        ) from exc

    in_cluster = kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    path = os.fspath(kubeconfig) if kubeconfig is not None else None
    source = (
        "in-cluster configuration"
        if in_cluster
        else f"kubeconfig {path or os.environ.get('KUBECONFIG') or '~/.kube/config'}"
    )
    try:
        if in_cluster:
            configuration = kubernetes.client.Configuration()
            account = os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR
            kubernetes.config.incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=os.path.join(account, "token"), cert_filename=os.path.join(account, "ca.crt")
            ).load_and_set(configuration)
            client = kubernetes.client.ApiClient(configuration)
        else:
            client = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context
            )
    except (kubernetes.config.ConfigException, OSError, ValueError, KeyError) as exc:
        raise ClusterError("configure", "the Kubernetes API client", f"{source}: {exc}") from exc
    log.info("using %s (%s)", source, client.configuration.host)
    result: kubernetes.client.ApiClient = client
    return result


class ApiClientLike(Protocol):
    """What `HttpApi` reads of a client: a `kubernetes.client.ApiClient`, or a `metax_k8s.connect.Connection`
    (the node agents', which does not import the kubernetes package)."""

    @property
    def configuration(self) -> Any: ...  # .host, .auth_settings()

    @property
    def default_headers(self) -> Any: ...

    @property
    def rest_client(self) -> Any: ...  # .pool_manager (urllib3)


@attrs.frozen
class Resource:
    """What discovery says about one kind: its URL segment and whether it lives in a namespace."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if subresource is not None:
            base += f"/{subresource}"
        return base


def target(kind: str, name: str | None, namespace: str | None = None) -> str:
    """How errors name an object: ``ConfigMap ns/name``."""
    where = f"{namespace}/{name}" if namespace and name else (name or (f"in {namespace}" if namespace else "(all)"))
    return f"{kind} {where}"


class HttpApi:
    """`Api` over HTTP with a `kubernetes.client.ApiClient` or a `metax_k8s.connect.Connection` (auth, TLS and
    connection pool)."""

    def __init__(
        self,
        client: ApiClientLike,
        *,
        request_timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        user_agent: str = "metax-operator",
        list_chunk: int = LIST_CHUNK,
    ) -> None:
        self.client = client
        self.request_timeout = request_timeout
        self.user_agent = user_agent
        self.list_chunk = list_chunk
        self._resources: dict[str, dict[str, Resource]] = {}
        self._lock = threading.Lock()

    # -- plumbing ------------------------------------------------------------------------------------

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        headers.update(self.client.default_headers)
        for setting in self.client.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _send(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        what: str,
        query: Mapping[str, str | None] | None = None,
        body: object = None,
        content_type: str | None = None,
        timeout: tuple[float, float] | None = None,
        stream: bool = False,
        fields: Fields | None = None,
    ) -> Any:
        """The answer, decoded (a list page with only ``fields`` of each item, `decoding.page`); with ``stream``,
        the response itself, to be read as it arrives."""
        url = self.client.configuration.host.rstrip("/") + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        connect, read = timeout or self.request_timeout
        try:
            response = self.client.rest_client.pool_manager.request(
                method,
                url,
                body=None if body is None else json.dumps(body),
                headers=self._headers("application/json" if body is not None and not content_type else content_type),
                timeout=urllib3.Timeout(connect=connect, read=read),
                preload_content=False,
                retries=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise retry.Unavailable(verb, what, f"no answer from {url}: {exc}") from exc
        if response.status >= 400:
            raise responses.error(response, verb, what)
        if stream:
            return response
        try:
            data = response.read()
        except urllib3.exceptions.HTTPError as exc:
            raise retry.Unavailable(verb, what, f"answer from {url} cut short: {exc}") from exc
        finally:
            response.release_conn()
        return decoding.page(data, fields)

    def resource(self, api_version: str, kind: str) -> Resource:
        """Discovery, cached per group version and refreshed once when a kind is missing (a new CRD)."""
        with self._lock:
            known = self._resources.get(api_version, {})
        if kind not in known:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                document = self._send("GET", path, verb="discover", what=api_version)
            except NotFound:
                document = {"resources": []}
            known = {
                r["kind"]: Resource(api_version, r["kind"], r["name"], bool(r.get("namespaced")))
                for r in document.get("resources", [])
                if "/" not in r["name"]
            }
            with self._lock:
                self._resources[api_version] = known
        if kind not in known:
            raise NotServed("discover", f"{kind} {api_version}", "the API server does not serve this kind")
        return known[kind]

    # -- verbs ----------------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        res = self.resource(api_version, kind)
        result: dict[str, Any] = self._send(
            "GET", res.path(namespace, name), verb="get", what=target(kind, name, namespace)
        )
        return result

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        fields: Fields | None = None,
    ) -> ObjectList:
        res = self.resource(api_version, kind)
        items: list[RawObject] = []
        query = {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": str(self.list_chunk)}
        while True:
            page = self._send(
                "GET", res.path(namespace), verb="list", what=target(kind, None, namespace), query=query, fields=fields
            )
            raw = page.pop("items", None) or []
            raw.reverse()
            while raw:  # each item is let go as soon as it is kept (or transformed): one page whole at most
                item = raw.pop()
                item["apiVersion"], item["kind"] = api_version, kind
                kept = item if transform is None else transform(item)
                if kept is not None:
                    items.append(kept)
            token = page.get("metadata", {}).get("continue")
            if not token:
                return ObjectList(items=items, resource_version=str(page["metadata"]["resourceVersion"]))
            query = {**query, "continue": token}

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
        fields: Fields | None = None,
    ) -> Iterator[WatchEvent]:
        res = self.resource(api_version, kind)
        what = target(kind, None, namespace)
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(max(1, timeout_seconds)),
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "resourceVersion": resource_version,
        }
        response = self._send(
            "GET",
            res.path(namespace),
            verb="watch",
            what=what,
            query=query,
            timeout=(self.request_timeout[0], timeout_seconds + 5.0),
            stream=True,
        )
        return responses.watch_events(response, what, fields)

    def create(self, obj: RawObject, *, field_manager: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        res, name, namespace = self._locate(obj)
        query = {"fieldManager": field_manager, "fieldValidation": "Strict", "dryRun": "All" if dry_run else None}
        result: dict[str, Any] = self._send(
            "POST", res.path(namespace), verb="create", what=target(res.kind, name, namespace), query=query, body=obj
        )
        return result

    def replace(self, obj: RawObject, *, field_manager: str | None = None) -> dict[str, Any]:
        res, name, namespace = self._locate(obj)
        query = {"fieldManager": field_manager, "fieldValidation": "Strict"}
        result: dict[str, Any] = self._send(
            "PUT",
            res.path(namespace, name),
            verb="replace",
            what=target(res.kind, name, namespace),
            query=query,
            body=obj,
        )
        return result

    def evict(self, name: str, namespace: str) -> None:
        res = self.resource("v1", "Pod")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        what = target("Pod", name, namespace)
        try:
            self._send("POST", res.path(namespace, name) + "/eviction", verb="evict", what=what, body=body)
        except retry.Retryable as exc:
            if exc.status == 429:  # a budget's answer, not the server's load: the caller decides when to ask again
                raise ClusterError("evict", what, exc.detail, 429) from exc
            raise

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: RawObject,
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        res = self.resource(api_version, kind)
        query = {"fieldManager": field_manager, "fieldValidation": "Strict"}
        result: dict[str, Any] = self._send(
            "PATCH",
            res.path(namespace, name),
            verb="patch",
            what=target(kind, name, namespace),
            query=query,
            body=patch,
            content_type=api.MERGE_PATCH,
        )
        return result

    def apply(
        self,
        obj: RawObject,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        res, name, namespace = self._locate(obj)
        query = {
            "fieldManager": field_manager,
            "force": "true" if force else "false",
            "fieldValidation": "Strict",
            "dryRun": "All" if dry_run else None,
        }
        verb = "apply" if subresource is None else f"apply {subresource} of"
        result: dict[str, Any] = self._send(
            "PATCH",
            res.path(namespace, name, subresource),
            verb=verb,
            what=target(res.kind, name, namespace),
            query=query,
            body=obj,
            content_type=api.APPLY_PATCH,
        )
        return result

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        res = self.resource(api_version, kind)
        self._send(
            "DELETE",
            res.path(namespace, name),
            verb="delete",
            what=target(kind, name, namespace),
            body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
        )

    def _locate(self, obj: RawObject) -> tuple[Resource, str, str | None]:
        metadata = obj.get("metadata") or {}
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise ClusterError("write", str(obj.get("kind")), "the object has no metadata.name")
        res = self.resource(str(obj.get("apiVersion")), str(obj.get("kind")))
        namespace = metadata.get("namespace") if res.namespaced else None
        if res.namespaced and not namespace:
            raise ClusterError("write", target(res.kind, name), "a namespaced object needs metadata.namespace")
        return res, name, namespace
