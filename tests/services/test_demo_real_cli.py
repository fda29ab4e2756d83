"""`metax-dev demo --cluster real`'s command line, without a cluster (the scenario itself:
tests/integration/demo/test_real_cluster.py).

Covers: ``--cluster memory`` stays the default and ``--keep`` is refused without ``--cluster real``;
``metax-dev demo`` passes ``--cluster`` and ``--keep`` on; the printed kubeconfig is the admin's with the
operator's namespace as its context's default (so ``kubectl get clusteroperator,ds,nodes -w`` lists the
agents' DaemonSets), and the watch commands are the plain one and, when the control plane built one, the same
with its kubectl's path.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from metax_dev import cli as dev_cli
from metax_dev import demo
from metax_dev.demo import cli as demo_cli
from metax_dev.demo import fleet as demo_fleet
from metax_dev.demo import realcli


def test_the_in_memory_cluster_stays_the_default_and_keep_needs_the_real_one() -> None:
    assert demo_cli.parser().parse_args([]).cluster == "memory"
    with pytest.raises(SystemExit) as exc:
        demo.main(["--keep"])
    assert exc.value.code == 2


def test_metax_dev_demo_passes_the_cluster_and_keep_on(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(demo, "main", lambda argv: seen.append(list(argv)) or 0)
    assert dev_cli.main(["demo", "--cluster", "real", "--keep", "--no-live", "--nodes", "3"]) == 0
    assert seen == [["--nodes", "3", "--cluster", "real", "--no-live", "--keep"]]


def test_the_watch_command_names_a_kubeconfig_in_the_operators_namespace(tmp_path: Path) -> None:
    admin = tmp_path / "admin.kubeconfig"
    admin.write_text(json.dumps({"contexts": [{"name": "admin", "context": {"cluster": "c", "user": "u"}}]}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text("")
    plane = types.SimpleNamespace(kubeconfig_path=admin, bin_dir=bin_dir)

    config = realcli.kubeconfig(plane, tmp_path)  # type: ignore[arg-type]
    contexts = json.loads(config.read_text())["contexts"]
    assert contexts == [{"name": "admin", "context": {"cluster": "c", "user": "u", "namespace": demo_fleet.NAMESPACE}}]
    assert realcli.watch_commands(plane, config) == [  # type: ignore[arg-type]
        f"KUBECONFIG={config} kubectl get clusteroperator,ds,nodes -w",
        f"KUBECONFIG={config} {bin_dir / 'kubectl'} get clusteroperator,ds,nodes -w",
    ]
