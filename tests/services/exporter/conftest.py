"""An exporter running as it does in its pod (its Recipe, the shared loop, real HTTP) against a fake GPU host
(metax_hw_fake: the real mx-smi adapter on a temporary root) and a PodResources server on the real proto."""

from __future__ import annotations

import contextlib
import pathlib
import threading
import urllib.request
from collections.abc import Iterator

import attrs
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metax_core.ports import hardware
from metax_hw_fake import builder
from metax_hw_fake import host as fake_host
from services.data_exporter import agent, bootstrap, config
from tests.services.exporter.kubelet_podresources import PodResourcesServer
from tests.waiting import wait_for

NODE = "gpu-node-1"


@attrs.define
class Running:
    fake: fake_host.FakeHost
    kubelet: PodResourcesServer
    exporter: agent.DataExporter

    @property
    def url(self) -> str:
        assert self.exporter.server is not None
        return f"http://127.0.0.1:{self.exporter.server.port}"

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            return str(response.read().decode())

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """Every sample of ``name`` in a fresh scrape, parsed by prometheus_client's own text parser."""
        found = []
        for family in text_string_to_metric_families(self.scrape()):
            found += [(dict(s.labels), s.value) for s in family.samples if s.name == name]
        return found


def start_exporter(
    root: pathlib.Path,
    fake: fake_host.FakeHost,
    socket: pathlib.Path,
    gpus: hardware.GpuTelemetry | None = None,
    **env: str,
) -> tuple[agent.DataExporter, threading.Event, threading.Thread]:
    """``gpus``: the telemetry source (default: the fake host's mx-smi adapter)."""
    settings = config.from_env(
        {
            "NODE_NAME": NODE,
            "METAX_EXPORTER_ADDRESS": "127.0.0.1",
            "METAX_EXPORTER_PORT": "0",
            "METAX_EXPORTER_SAMPLE_INTERVAL": "0.2",
            "METAX_TICK": "0.05",
            "METAX_POD_RESOURCES_SOCKET": str(socket),
            "METAX_PROBE_FILE": str(root / "probe"),
            **env,
        }
    )
    built = bootstrap.bootstrap(settings, hw=agent.Sources(gpus or fake.monitor, bootstrap.pod_devices(socket)))
    stop = threading.Event()
    thread = threading.Thread(target=bootstrap.runner(built), args=(stop,), name="exporter", daemon=True)
    thread.start()
    wait_for("the exporter's first sample", lambda: built.server is not None and built.view.sample.sampled_at)
    return built, stop, thread


@pytest.fixture
def running(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> Iterator[Running]:
    gpus, vfs = getattr(request, "param", (2, 2))
    fake = builder.FakeHostBuilder().gpus(gpus).host_driver("2.18.0").vfs(vfs).build(tmp_path / "host")
    with exporter_on(tmp_path, fake) as running:
        yield running


@contextlib.contextmanager
def exporter_on(
    tmp_path: pathlib.Path, fake: fake_host.FakeHost, gpus: hardware.GpuTelemetry | None = None, **env: str
) -> Iterator[Running]:
    """The exporter on ``fake`` (its telemetry ``gpus``, default mx-smi's; more settings in ``env``) with a
    PodResources server, stopped after."""
    kubelet = PodResourcesServer(tmp_path / "kubelet.sock").start()
    built, stop, thread = start_exporter(tmp_path, fake, kubelet.socket, gpus=gpus, **env)
    try:
        yield Running(fake, kubelet, built)
    finally:
        stop.set()
        thread.join(timeout=30)
        kubelet.stop()
