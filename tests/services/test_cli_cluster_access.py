"""Every `metax-operator` command that needs a cluster finds it and fails without it the same way (issue 39 item 7).

Aspects:

* each such command (doctor, diff, rollout confirm, uninstall) with no usable kubeconfig, and with an API server
  that does not answer, exits `connection.EXIT_NO_CLUSTER` with a one-line message naming what failed, no
  traceback; ``doctor -o json`` and ``diff -o json`` print it as a JSON error document on stdout instead
  (R-DOCTOR, R-DIFF), and ``diff -o json`` says a file that is not one document in JSON too, before asking the
  cluster; a cluster without cluster-operator is no such failure for ``rollout confirm`` (exit 2, says so);
* every ``--kubeconfig`` has the one help text and the exit code note, and only those commands have one;
* the lookup order that help text describes is what the CLI's connection does: ``--kubeconfig`` first (even in a
  pod), then the pod's ServiceAccount, then ``$KUBECONFIG`` (one file, not a list), then ``~/.kube/config``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import socket
from collections.abc import Iterator

import pytest
import yaml

from metax_core.errors import ClusterError
from metax_k8s import crd
from metax_k8s.inmemory import InMemoryApiServer
from services.cli import connection, documents, main, rollout

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
CLUSTER_COMMANDS = {
    ("doctor",): [],
    ("diff",): ["--set", "driver.payload.version=2.21.0"],
    ("rollout", "confirm"): [],
    ("uninstall",): ["--timeout", "1"],
    ("apply-crd",): [],
}
"""Each command that needs a cluster, with the arguments it needs besides."""
JSON_COMMANDS = [("doctor",), ("diff",)]


def _kubeconfig(path: pathlib.Path, server: str) -> pathlib.Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return path


@pytest.fixture
def silent_server(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A kubeconfig whose server refuses connections: a port bound here, never listening."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield _kubeconfig(tmp_path / "silent", f"http://127.0.0.1:{bound.getsockname()[1]}")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", list(CLUSTER_COMMANDS), ids=" ".join)
def test_no_kubeconfig_is_the_same_exit_code_everywhere(
    command: tuple[str, ...], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    code, out, err = _run(capsys, *command, *CLUSTER_COMMANDS[command], "--kubeconfig", str(missing))
    assert code == connection.EXIT_NO_CLUSTER == 3
    assert err.startswith("error: no usable cluster configuration:") and str(missing) in err
    assert out == "" and "Traceback" not in err


@pytest.mark.parametrize("command", list(CLUSTER_COMMANDS), ids=" ".join)
def test_an_api_server_that_does_not_answer_is_the_same_exit_code_everywhere(
    command: tuple[str, ...], silent_server: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, *command, *CLUSTER_COMMANDS[command], "--kubeconfig", str(silent_server))
    assert code == connection.EXIT_NO_CLUSTER
    assert err.startswith("error: cannot reach the API server:") and "Connection refused" in err


@pytest.mark.parametrize("command", JSON_COMMANDS, ids=" ".join)
def test_with_json_output_no_cluster_is_a_json_error(
    command: tuple[str, ...], tmp_path: pathlib.Path, silent_server: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-DOCTOR, R-DIFF: ``-o json`` prints JSON on stdout for every outcome, these failures too."""
    args = [*command, *CLUSTER_COMMANDS[command], "-o", "json", "--kubeconfig"]
    for kubeconfig, error, start in (
        (tmp_path / "missing", connection.KUBECONFIG_ERROR, "no usable cluster configuration: "),
        (silent_server, connection.API_SERVER_ERROR, "cannot reach the API server: "),
    ):
        code, out, err = _run(capsys, *args, str(kubeconfig))
        document = json.loads(out)
        assert code == connection.EXIT_NO_CLUSTER and err == ""
        assert set(document) == {"error", "message"} and document["error"] == error
        assert document["message"].startswith(start)


def test_diff_says_a_file_of_several_documents_as_json_before_asking_the_cluster(
    silent_server: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-DIFF: the file is read first; a workload example is a usage error, in JSON, exit 2."""
    source = str(EXAMPLES / "dra-gpus.yaml")
    code, out, err = _run(capsys, "diff", "-f", source, "-o", "json", "--kubeconfig", str(silent_server))
    document = json.loads(out)
    assert code == documents.EXIT_INVALID and err == ""
    assert document["error"] == documents.USAGE_ERROR
    assert document["message"].startswith(f"{source}: must hold exactly one document, found 3 (")


def test_confirm_without_cluster_operator_is_not_a_missing_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    server = InMemoryApiServer()
    server.apply(crd.crd(), field_manager="test", force=True)
    assert rollout.confirm_waiting_step(server, None) == documents.EXIT_INVALID
    assert "no ClusterOperator cluster-operator: is the chart installed? Nothing confirmed" in capsys.readouterr().err


def _cluster_parsers() -> dict[str, argparse.ArgumentParser]:
    found = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}".strip())
            elif "--kubeconfig" in action.option_strings:
                found[path] = parser

    walk(main.build_parser(), "")
    return found


def test_every_kubeconfig_option_has_the_one_help_and_the_exit_code_note() -> None:
    parsers = _cluster_parsers()
    assert set(parsers) == {" ".join(c) for c in CLUSTER_COMMANDS}
    for name, parser in parsers.items():
        (option,) = (a for a in parser._actions if "--kubeconfig" in a.option_strings)
        assert option.help == connection.KUBECONFIG_HELP, name
        assert f"Exit code {connection.EXIT_NO_CLUSTER}:" in (parser.epilog or ""), name
        assert " ".join(connection.KUBECONFIG_HELP.split()) in " ".join(parser.format_help().split()), name


def _source(kubeconfig: str | None) -> str:
    api = connection.api(kubeconfig, "test")
    source: str = api.client.source  # type: ignore[attr-defined]  # a metax_k8s.connect.Connection
    return source


def test_the_lookup_order_the_help_describes(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`connection.KUBECONFIG_HELP`, step by step, through the CLI's own `connection.api`."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    default = _kubeconfig(home / ".kube" / "config", "http://127.0.0.1:1")
    from_env = _kubeconfig(tmp_path / "from-env", "http://127.0.0.1:2")
    given = _kubeconfig(tmp_path / "given", "http://127.0.0.1:3")
    monkeypatch.setenv("HOME", str(home))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert _source(None) == f"kubeconfig {default}"  # last: ~/.kube/config
    monkeypatch.setenv("KUBECONFIG", str(from_env))
    assert _source(None) == f"kubeconfig {from_env}"  # before it: $KUBECONFIG
    monkeypatch.setenv("KUBECONFIG", f"{from_env}:{default}")
    with pytest.raises(ClusterError, match=f"kubeconfig {from_env}:{default}: "):  # one file, not a list
        _source(None)
    account = tmp_path / "serviceaccount"  # empty: in a pod, the ServiceAccount is used (and has no CA here)
    account.mkdir()
    monkeypatch.setenv("METAX_SERVICEACCOUNT_DIR", str(account))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ClusterError, match=f"in-cluster configuration: CA {account}"):  # before $KUBECONFIG
        _source(None)
    assert _source(str(given)) == f"kubeconfig {given}"  # first, even in a pod: --kubeconfig
