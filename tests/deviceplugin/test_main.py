"""``metax-gpu-device`` refuses to start, with exit code 2 and a message naming the problem, when its
configuration is bad or the Kubernetes API cannot be configured (instead of a traceback or a half start)."""

from __future__ import annotations

import logging
import pathlib
import re

import pytest

from services.gpu_device import __main__ as entry


def test_missing_node_name_stops_with_a_message(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    caplog.set_level(logging.ERROR)
    assert entry.main([]) == 2
    assert "cannot start gpu-device: NODE_NAME: must be set" in caplog.text


def test_unconfigurable_cluster_access_stops_with_a_message(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv("NODE_NAME", "n1")
    (tmp_path / "sys").mkdir()  # a host root (without /sys the agent stops before the API: metax_hw.host)
    monkeypatch.setenv("METAX_HOST_ROOT", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    caplog.set_level(logging.ERROR)
    assert entry.main([]) == 2
    # "cannot configure the Kubernetes API client: ..." (or, in a tree without metax_k8s.nodes yet,
    # "needs the Kubernetes adapter"): either way a message, not a traceback.
    assert re.search(r"cannot start gpu-device: .*Kubernetes (API client|adapter)", caplog.text)
