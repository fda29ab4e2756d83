"""One skeleton for every component (issue 43 item 3): the shared process (`services._agent.service`) and the
node agents' one recipe (`services._agent.builder.Recipe`).

Covered: a refused start is exit code 2 with one message naming the component; a started one runs until
SIGTERM and exits 0; a component's own options parse; every node agent (gpu-device, dra-driver and the
exporter included) stands on `NodeAgentBase` and is built by a `Recipe`; a recipe's own parts are built from
the settings unless the caller passes them; every Deployment's and socket server's ``main`` is a `Service`'s.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import threading
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from metax_core.errors import ClusterError, FieldError, InvalidSpec
from services._agent import base, builder, cluster, service, settings

NODE_AGENTS = (
    "gpu_label",
    "container_runtime",
    "driver_manager",
    "maca",
    "vfio_manager",
    "topo_worker",
    "gpu_device",
    "dra_driver",
    "data_exporter",
)


def test_a_refused_start_is_exit_code_2_with_one_message(caplog: pytest.LogCaptureFixture) -> None:
    def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
        raise InvalidSpec([FieldError("EXAMPLE_PORT", "must be an integer, got 'x'")])

    caplog.set_level(logging.ERROR)
    assert service.Service("example", start).main([]) == 2
    assert "cannot start example: EXAMPLE_PORT: must be an integer, got 'x'" in caplog.text


def test_an_error_the_component_does_not_name_is_not_swallowed() -> None:
    def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
        raise ClusterError("configure", "the Kubernetes API client", "no kubeconfig")

    with pytest.raises(ClusterError):
        service.Service("example", start, refused=(InvalidSpec,)).main([])


def test_a_started_component_runs_until_sigterm_and_exits_0() -> None:
    seen: dict[str, Any] = {}

    def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
        seen["kubeconfig"] = args.kubeconfig

        def run(stop: threading.Event) -> None:
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start()
            seen["stopped"] = stop.wait(10)

        return run

    before = signal.getsignal(signal.SIGTERM)
    example = service.Service(
        "example", start, options=lambda parser: parser.add_argument("--kubeconfig", default=None)
    )
    assert example.main(["--kubeconfig", "/k"]) == 0
    assert seen == {"kubeconfig": "/k", "stopped": True}
    assert signal.getsignal(signal.SIGTERM) is before


def test_help_names_the_command_and_where_its_environment_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
        raise AssertionError("--help starts nothing")

    with pytest.raises(SystemExit) as done:
        service.Service("topo-master", start, doc="docs/topology.md").main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: metax-topo-master")
    assert "docs/topology.md" in out


@pytest.mark.parametrize("package", NODE_AGENTS)
def test_every_node_agent_stands_on_the_base_and_is_built_by_a_recipe(package: str) -> None:
    recipe = importlib.import_module(f"services.{package}.bootstrap").RECIPE
    assert isinstance(recipe, builder.Recipe)
    assert isinstance(recipe.agent, type) and issubclass(recipe.agent, base.NodeAgentBase)
    if package != "data_exporter":  # the exporter's main pins malloc's threshold first, then calls its recipe's
        assert importlib.import_module(f"services.{package}.__main__").main.__self__ is recipe


def test_gpu_discovery_is_built_by_a_recipe_too() -> None:
    from services.gpu_label import __main__ as entry
    from services.gpu_label import discovery

    assert entry.discover.__self__ is discovery.RECIPE
    assert issubclass(discovery.RECIPE.agent, base.NodeAgentBase)


@pytest.mark.parametrize("package", ["topo_master", "gpu_scheduler", "container_edit", "webhook"])
def test_every_deployment_and_socket_server_main_is_a_service(package: str) -> None:
    entry = importlib.import_module(f"services.{package}.__main__")
    assert isinstance(entry.main.__self__, service.Service)


@attrs.frozen(kw_only=True)
class Example(settings.NodeAgentSettings):
    pass


class Parts(base.NodeAgentBase):
    name = "example"

    def __init__(self, settings: Example, *, hw: object, ports: cluster.ClusterPorts, board: Any, **parts: Any) -> None:
        super().__init__(settings, self.name, ports=ports, board=board, log=logging.getLogger(__name__))
        self.settings, self.hw, self.parts = settings, hw, parts

    def tick(self) -> None: ...

    def shutdown(self) -> None: ...


def test_a_recipe_builds_only_the_parts_the_caller_does_not_pass(tmp_path: Any) -> None:
    built: list[str] = []

    def production(name: str) -> Any:
        def make(s: Example) -> str:
            built.append(name)
            return f"production {name} for {s.node_name}"

        return make

    recipe = builder.Recipe(
        component="example",
        settings=lambda environ: Example(node_name="n1", host_root=tmp_path),
        hardware=lambda s: "production hardware",
        agent=Parts,
        watches=lambda s: (),
        cluster_ports=cluster.no_api,
        parts={"files": production("files"), "server": production("server")},
    )
    agent = recipe.bootstrap(Example(node_name="n1", host_root=tmp_path), hw="fake", files="fake files", clock=None)
    assert agent.hw == "fake"
    assert agent.parts == {"files": "fake files", "server": "production server for n1"}
    assert built == ["server"]
