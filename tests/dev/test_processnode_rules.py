"""The process node's pure rules (metax_dev/processnode): container plans, pod phase and status, token renewal.

Covers: the command is found in the given bin dirs (absolute paths too), a missing command or no command at all
is a StartError naming the command and the directories; env values with ``$(VAR)`` expansion (``$$`` escapes),
every supported fieldRef, configMapKeyRef/secretKeyRef through the lookup (optional ones skipped, missing ones
named), unsupported sources refused; probes with kubelet defaults and named ports; the pod phase rule (Pending,
Running, Succeeded, Failed); the status document's conditions and container states; a token is renewed at 80 %
of its lifetime; stand-ins for a GPU node: paths rewritten by whole components (inside ``sh -c`` too), the
operator-rendered driver pod planned with its image's entrypoint, the host root, its payload volume and its
own /tmp (the probe and the agent name the same file), its payload init container's own command copying the
staged payload, refused without stand-ins.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest

from metax_dev.processnode import podspec, standins, status, tokens

FACTS = podspec.PodFacts(node_name="process-node-0", pod_ip="198.18.0.7", host_ip="198.18.0.7")
POD: dict[str, Any] = {
    "metadata": {"name": "op-1", "namespace": "metax-operator", "uid": "u-1", "labels": {"app": "op"}},
    "spec": {"nodeName": "process-node-0", "serviceAccountName": "metax-operator"},
}


def _no_lookup(kind: str, name: str, key: str) -> str:
    raise KeyError(f"{kind} {name} not found")


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    tool = tmp_path / "metax-tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    return tmp_path


def test_the_command_is_found_in_the_bin_dirs_with_its_args(bin_dir: Path) -> None:
    container = {"name": "c", "command": ["metax-tool", "run"], "args": ["--x"]}
    assert podspec.resolve_command(container, [bin_dir]) == (str(bin_dir / "metax-tool"), "run", "--x")
    absolute = {"name": "c", "command": [str(bin_dir / "metax-tool")]}
    assert podspec.resolve_command(absolute, []) == (str(bin_dir / "metax-tool"),)


def test_the_harness_executable_is_not_rewritten_when_the_checkout_lives_under_tmp(tmp_path: Path) -> None:
    """A pod's emptyDir at /tmp stands for /tmp; the venv's executable found in the bin dirs is the harness's own
    path, and a CI clone under /tmp must still start it (a fresh clone's run failed so: 'No such file')."""
    venv_bin = Path("/tmp") / f"metax-clone-{tmp_path.name}" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    try:
        tool = venv_bin / "metax-tool"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
        pod = {
            **POD,
            "spec": {**POD["spec"], "volumes": [{"name": "tmp", "emptyDir": {}}]},
        }
        container = {
            "name": "c",
            "command": ["metax-tool", "--state", "/tmp/state"],
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }
        paths = standins.path_map(pod, container, tmp_path / "pod", None)
        plan = podspec.plan(container, pod, FACTS, [venv_bin], _no_lookup, paths)
        assert plan.argv == (str(tool), "--state", str(tmp_path / "pod" / "volumes" / "tmp" / "state"))
        # a stand-in entrypoint (the harness's own argv, e.g. sys.executable under the clone) is not rewritten
        stand_ins = standins.StandIns(host_root=tmp_path / "host", entrypoints={"metax-x": (str(tool), "/tmp/a")})
        bare = {"name": "c", "image": "r/metax-x:1", "args": ["/tmp/b"]}
        paths = standins.path_map(pod, bare, tmp_path / "pod", stand_ins)
        plan = podspec.plan(bare, pod, FACTS, [], _no_lookup, paths, stand_ins)
        assert plan.argv == (str(tool), "/tmp/a", str(tmp_path / "pod" / "tmp" / "b"))
    finally:
        shutil.rmtree(venv_bin.parents[1])


def test_a_missing_command_is_a_start_error_naming_it_and_where_it_was_looked_for(bin_dir: Path) -> None:
    with pytest.raises(podspec.PlanError, match=r"executable 'nope' not found in .*") as missing:
        podspec.resolve_command({"name": "c", "command": ["nope"]}, [bin_dir])
    assert missing.value.reason == "StartError" and str(bin_dir) in missing.value.message
    with pytest.raises(podspec.PlanError, match=r"no command: a process node has no image \(r/x:1\)"):
        podspec.resolve_command({"name": "c", "image": "r/x:1", "args": ["a"]}, [bin_dir])


def test_env_values_field_refs_and_references() -> None:
    env = [
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "GREETING", "value": "on $(NODE), not $(MISSING), $$(NODE) escaped"},
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
    ]
    result = podspec.environment({"name": "c", "env": env}, POD, FACTS, _no_lookup)
    assert result == {
        "NODE": "process-node-0",
        "GREETING": "on process-node-0, not $(MISSING), $(NODE) escaped",
        "NAME": "op-1",
        "NS": "metax-operator",
        "UID": "u-1",
        "SA": "metax-operator",
        "IP": "198.18.0.7",
        "APP": "op",
    }


def test_config_map_and_secret_keys_come_through_the_lookup() -> None:
    seen: list[tuple[str, str, str]] = []

    def lookup(kind: str, name: str, key: str) -> str:
        seen.append((kind, name, key))
        if name == "gone":
            raise KeyError("not found")
        return f"{kind}:{key}"

    env = [
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "p"}}},
        {"name": "C", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "p", "optional": True}}},
    ]
    assert podspec.environment({"name": "c", "env": env}, POD, FACTS, lookup) == {"A": "ConfigMap:k", "B": "Secret:p"}
    assert seen[:2] == [("ConfigMap", "cm", "k"), ("Secret", "s", "p")]
    required = [{"name": "D", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]
    with pytest.raises(podspec.PlanError, match=r"env\[0\] D: ConfigMap gone key k"):
        podspec.environment({"name": "c", "env": required}, POD, FACTS, lookup)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}], "resourceFieldRef"),
        ([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}], "fieldRef 'spec.hostname'"),
    ],
)
def test_unsupported_env_sources_are_refused_by_name(env: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(podspec.PlanError, match=message) as refused:
        podspec.environment({"name": "c", "env": env}, POD, FACTS, _no_lookup)
    assert refused.value.reason == "CreateContainerConfigError"


def test_probes_take_kubelet_defaults_and_resolve_named_ports() -> None:
    container = {
        "name": "c",
        "ports": [{"name": "webhook", "containerPort": 9443}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "webhook", "scheme": "HTTPS"}},
        "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 20, "failureThreshold": 1},
    }
    readiness = podspec.probe(container, "readinessProbe")
    assert readiness == podspec.Probe("httpGet", port=9443, path="/readyz", scheme="HTTPS")
    assert readiness.period == 10 and readiness.timeout == 1 and readiness.failure_threshold == 3
    liveness = podspec.probe(container, "livenessProbe")
    assert liveness is not None and liveness.command == ("true",) and liveness.period == 20
    assert podspec.probe(container, "startupProbe") is None  # none given
    with pytest.raises(podspec.PlanError, match="no port named 'metrics'"):
        podspec.probe({"name": "c", "readinessProbe": {"tcpSocket": {"port": "metrics"}}}, "readinessProbe")


def test_what_a_process_node_cannot_honour_is_named() -> None:
    assert podspec.unsupported(POD) is None
    assert "initContainers" in str(podspec.unsupported({"spec": {"initContainers": [{"name": "i"}]}}))
    hooks = {"spec": {"containers": [{"name": "a"}, {"name": "b", "lifecycle": {"preStop": {}}}]}}
    assert podspec.unsupported(hooks) == "spec.containers[1].lifecycle is not supported by the process node"
    startup = {"spec": {"containers": [{"name": "a", "startupProbe": {"exec": {"command": ["true"]}}}]}}
    assert "spec.containers[0].startupProbe" in str(podspec.unsupported(startup))


def _c(state: status.State, *, code: int | None = None, restarts: int = 0, again: bool = True) -> status.Container:
    ended = status.Terminated(code, "Completed" if code == 0 else "Error", "", "t0", "t1") if code is not None else None
    return status.Container("c", "img", state, restart_count=restarts, terminated=ended, will_restart=again)


def test_the_pod_phase_rule() -> None:
    assert status.phase([_c(status.State.WAITING)]) is status.Phase.PENDING
    assert status.phase([_c(status.State.RUNNING)]) is status.Phase.RUNNING
    crash_loop = _c(status.State.WAITING, code=3, restarts=2)
    assert status.phase([crash_loop]) is status.Phase.RUNNING
    done = _c(status.State.TERMINATED, code=0, again=False)
    failed = _c(status.State.TERMINATED, code=2, again=False)
    assert status.phase([done]) is status.Phase.SUCCEEDED
    assert status.phase([done, failed]) is status.Phase.FAILED
    assert status.phase([done, _c(status.State.RUNNING)]) is status.Phase.RUNNING


def test_the_status_document() -> None:
    ready = status.Container("a", "img", status.State.RUNNING, ready=True, started_at="t0", pid=42)
    backing_off = status.Container(
        "b",
        "img",
        status.State.WAITING,
        restart_count=1,
        reason="CrashLoopBackOff",
        terminated=status.Terminated(3, "Error", "", "t0", "t1"),
    )
    pod = status.PodStatus(status.Phase.RUNNING, (ready, backing_off), "198.18.0.7", "198.18.0.7", "t0")
    document = status.document(pod)
    conditions = {c["type"]: c["status"] for c in document["conditions"]}
    assert conditions == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "False",
        "Ready": "False",
    }
    a, b = document["containerStatuses"]
    assert a["state"] == {"running": {"startedAt": "t0"}} and a["containerID"] == "process://42" and a["ready"]
    assert b["state"] == {"waiting": {"reason": "CrashLoopBackOff"}} and b["restartCount"] == 1
    assert b["lastState"]["terminated"]["exitCode"] == 3
    assert document["podIP"] == "198.18.0.7" and document["podIPs"] == [{"ip": "198.18.0.7"}]
    everyone = status.document(attrs_evolve(pod, (ready,)))
    assert {c["type"]: c["status"] for c in everyone["conditions"]}["Ready"] == "True"


def attrs_evolve(pod: status.PodStatus, containers: tuple[status.Container, ...]) -> status.PodStatus:
    return status.PodStatus(pod.phase, containers, pod.pod_ip, pod.host_ip, pod.start_time)


def test_a_token_is_renewed_at_80_percent_of_its_lifetime() -> None:
    issued = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    token = tokens.Token("t", issued, issued + dt.timedelta(seconds=3600))
    assert not token.renew_due(issued + dt.timedelta(seconds=2879))
    assert token.renew_due(issued + dt.timedelta(seconds=2880))


# --- stand-ins for a GPU node (docs/processnode.md) -------------------------------------------------------


def _rendered_driver_pod() -> dict[str, Any]:
    from metax_core.cluster import workloads
    from metax_core.spec import validation

    s = validation.parse({"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.20.0"}}})
    (ds,) = [
        o for o in workloads.render(s).objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "metax-driver"
    ]
    return {
        "metadata": {"name": "metax-driver-x", "namespace": "metax-operator", "uid": "u-2"},
        **ds["spec"]["template"],
    }


def _stand_ins(tmp_path: Path) -> standins.StandIns:
    return standins.StandIns(
        host_root=tmp_path / "host",
        entrypoints={"metax-driver": ("/bin/true", "driver-manager")},
        payloads={"registry.example.com/metax/driver-image:2.20.0": tmp_path / "payload"},
        tool_dirs=(tmp_path / "host" / "bin",),
    )


def test_a_path_is_rewritten_by_whole_components_longest_prefix_first(tmp_path: Path) -> None:
    paths = standins.PathMap({"/host": tmp_path / "h", "/host/sys": tmp_path / "s", "/tmp": tmp_path / "t"})
    assert paths.rewrite("/host/sys/module") == f"{tmp_path}/s/module"
    assert paths.rewrite("/host") == f"{tmp_path}/h"
    assert paths.rewrite("/hostile/x") == "/hostile/x"
    assert paths.rewrite("/var/tmp/x") == "/var/tmp/x"
    assert paths.rewrite('cp -a /tmp/. "/host/dev/"') == f'cp -a {tmp_path}/t/. "{tmp_path}/h/dev/"'
    assert paths.rewrite("--dir=/tmp/a") == f"--dir={tmp_path}/t/a"


def test_the_rendered_driver_pod_runs_with_its_entrypoint_payload_host_root_and_own_tmp(tmp_path: Path) -> None:
    pod = _rendered_driver_pod()
    stand_ins = _stand_ins(tmp_path)
    pod_dir = tmp_path / "pod"
    assert podspec.unsupported(pod, stand_ins) is None
    assert "driver-image:2.20.0" in (podspec.unsupported(pod) or "")  # without stand-ins: refused, named
    (agent,) = pod["spec"]["containers"]
    plan = podspec.plan(agent, pod, FACTS, (), _no_lookup, standins.path_map(pod, agent, pod_dir, stand_ins), stand_ins)
    assert plan.argv == ("/bin/true", "driver-manager")
    assert plan.env["METAX_HOST_ROOT"] == str(stand_ins.host_root)
    assert plan.env["METAX_PAYLOAD_DIR"] == str(pod_dir / "volumes" / "payload")
    assert plan.env["METAX_DRIVER_VERSION"] == "2.20.0"
    assert plan.env["METAX_PROBE_FILE"] == str(pod_dir / "volumes" / "tmp" / "metax-agent-ready")  # its /tmp emptyDir
    assert plan.readiness is not None and plan.readiness.command == ("test", "-f", plan.env["METAX_PROBE_FILE"])
    (init,) = pod["spec"]["initContainers"]
    copy = podspec.plan(init, pod, FACTS, (), _no_lookup, standins.path_map(pod, init, pod_dir, stand_ins), stand_ins)
    script = copy.argv[-1]
    assert f'cp -a {tmp_path}/payload/. "{pod_dir}/volumes/payload/"' in script, script


def test_a_pod_without_command_and_without_an_entrypoint_for_its_image_is_a_start_error(tmp_path: Path) -> None:
    container = {"name": "label", "image": "registry.example.com/metax/metax-gpu-label:0.1.0"}
    with pytest.raises(podspec.PlanError, match="no command"):
        podspec.resolve_command(container, (), _stand_ins(tmp_path))
    assert standins.repository("registry.example.com:5000/metax/metax-driver:0.1.0") == "metax-driver"
