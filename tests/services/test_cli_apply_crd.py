"""`metax-operator apply-crd` (the chart's pre-upgrade hook, R-UPGRADE): the CRD at this release before Helm writes.

Covers, through the command as the hook runs it (exit code and the line it prints): an older release's CRD is
applied and Established; a newer release's is kept; a CRD that cannot be applied fails the hook (exit 1, the
reason), so ``helm upgrade`` stops before it changed anything.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from metax_core import release
from metax_core.cluster import crd_policy
from metax_core.errors import ClusterError
from metax_k8s import crd
from metax_k8s.inmemory import InMemoryApiServer
from services.cli import connection
from services.cli import crd as apply_crd


def _served(api: InMemoryApiServer, release_name: str) -> None:
    body = copy.deepcopy(crd.crd())
    body["metadata"]["annotations"][crd_policy.ANNOTATION] = release_name
    api.apply(body, field_manager="helm", force=True)


def _live_release(api: InMemoryApiServer) -> str | None:
    return crd_policy.release_of(api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd.NAME))


def _run(api: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setattr(connection, "api", lambda kubeconfig, user_agent: api)
    code = apply_crd.cmd_apply_crd(argparse.Namespace(kubeconfig=None))
    return code, capsys.readouterr().out


def test_an_older_release_crd_is_applied(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    api = InMemoryApiServer()
    _served(api, "0.0.1")
    code, out = _run(api, monkeypatch, capsys)
    assert code == 0 and f"now serves release {release.running()}'s schema" in out
    assert _live_release(api) == release.running()


def test_a_newer_release_crd_is_kept(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    api = InMemoryApiServer()
    _served(api, "99.0.0")
    code, out = _run(api, monkeypatch, capsys)
    assert code == 0 and "release 99.0.0's schema" in out and "kept" in out
    assert _live_release(api) == "99.0.0"


class Refusing:
    def __init__(self, inner: InMemoryApiServer) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, obj: Any, **kw: Any) -> Any:
        raise ClusterError("apply", f"CustomResourceDefinition {crd.NAME}", "forbidden", 403)


def test_a_crd_that_cannot_be_applied_fails_the_hook(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = InMemoryApiServer()
    _served(api, "0.0.1")
    code, out = _run(Refusing(api), monkeypatch, capsys)
    assert code == 1 and "forbidden" in out and "0.0.1" in out
    assert _live_release(api) == "0.0.1"
