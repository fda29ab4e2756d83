"""``metax-operator diff`` predicts what an edit then really does, on the real control plane (R-DIFF, R-ROLLOUT).

One install reused by every edit: the real operator as a process, the session's kwok nodes (two GPU nodes, one
CPU node; kwok runs the DaemonSets' pods). For each edit, ``diff`` runs first (in-process, the console
script's code, ``-o json``), then the edit is applied as Helm applies it, and what really happens is compared:

- a global toleration: predicted, every workload's pods restart on the nodes that run them (the driver's all at
  once, without a rollout), and each object as the server-side apply dry run says it would be stored; really,
  exactly those pods are replaced (new uids on the same nodes) and each object is stored as predicted;
- a component disabled (vfioManager): predicted, its DaemonSet and RBAC deleted and its pods removed; really,
  every object predicted deleted is gone and no other workload's pod is replaced;
- a driver version bump with ``enableRollout`` (a canary of one node, then the rest, ``maxParallel`` 1):
  predicted, the rollout plan's loops; really, the operator deletes the driver pods in those loops;
- a bad value (an unknown field): predicted, refused naming the field, exit 2; really, the API server refuses
  the apply (``fieldValidation=Strict``);
- a VF change (``diff --driver-config``, on an install of its own): one GPU node's VF count 0 → 4 and a cluster
  module parameter; predicted, that node's gpu-device pod recreated and no other pod, and the ConfigMap's diff;
  the same prediction through ``kubectl metax diff --driver-config -`` (kubectl's plugin lookup, the ConfigMap's
  data on stdin); then the edit applied as an administrator does (``kubectl apply --server-side``); really,
  exactly that pod is replaced, the operator records the new counts, and the ConfigMap is stored exactly as
  the dry run said; the same file again changes nothing; a bad ConfigMap is refused naming its fields, exit 2.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml
from operator_helpers import NS, Env, cluster_operator, wait_for
from rollout_helpers import DeletionRecorder

from metax_core import release
from metax_core.cluster import diff, render_settings
from metax_core.errors import ClusterError, NotFound
from metax_core.spec import validation
from metax_dev.controlplane import build
from services.cli import diff as cli_diff
from services.cli import diff_driver_config, main

pytestmark = pytest.mark.integration

BASE: dict[str, Any] = {"registry": "r.example.com", "driver": {"payload": {"version": "2.20.0"}}}
POLICY = {
    "enableRollout": True,
    "upgradeSteps": [{"replicas": 1, "pause": False}, {"replicas": "100%", "pause": False}],
    "maxParallel": 1,
}


def predict(
    capsys: pytest.CaptureFixture[str], env: Env, spec: dict[str, Any] | None = None, *sets: str
) -> tuple[int, dict[str, Any]]:
    args = ["diff", "-o", "json", "--kubeconfig", str(env.kubeconfig), "--version", release.running()]
    if spec is not None:
        path = env.log_dir / "new.yaml"
        path.write_text(yaml.safe_dump(cluster_operator(spec)))
        args += ["-f", str(path)]
    for s in sets:
        args += ["--set", s]
    capsys.readouterr()
    code = main.main(args)
    return code, json.loads(capsys.readouterr().out)


def pods(env: Env) -> dict[tuple[str, str], str]:
    """(workload, node) → uid of its live pod, on the test's nodes."""
    nodes = set(env.gpu_nodes + env.other_nodes)
    found = {}
    for pod in env.api.list("v1", "Pod", namespace=NS).items:
        node, meta = pod["spec"].get("nodeName"), pod["metadata"]
        owners = [o["name"] for o in meta.get("ownerReferences") or [] if o["kind"] in ("DaemonSet", "ReplicaSet")]
        if node in nodes and owners and not meta.get("deletionTimestamp"):
            workload = owners[0] if owners[0] in env.daemonsets() else owners[0].rsplit("-", 1)[0]
            found[(workload, node)] = meta["uid"]
    return found


def not_replaced(env: Env, before: dict[tuple[str, str], str], predicted: set[tuple[str, str]]) -> list[Any]:
    """The predicted restarts that have not happened: a DaemonSet's pod on that node still the old one (or none
    yet); a Deployment's old pod still there (its new one may land on another node)."""
    now = pods(env)
    live_uids = set(now.values())
    daemonsets = env.daemonsets()
    missing: list[Any] = []
    for key in sorted(predicted):
        if key[0] in daemonsets:
            if now.get(key) in (None, before[key]):
                missing.append(key)
        elif before[key] in live_uids or not any(w == key[0] for w, _ in now):
            missing.append(key)
    return missing


def dry_run(env: Env, live: dict[str, Any], new: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """What `metax-operator diff` dry-runs: each changed object as the API server would store it."""
    settings = render_settings.RenderSettings(namespace=NS, version=release.running())
    parsed = validation.parse(new)
    prediction = diff.predict(validation.parse(live), parsed, settings=settings, pods_on=cli_diff._pods_on(env.api, NS))
    return cli_diff.server_side(env.api, prediction, parsed, settings)[1]


def still_there(env: Env, objects: list[tuple[str, str, str, str | None]]) -> list[tuple[str, str]]:
    found = []
    for api_version, kind, name, namespace in objects:
        try:
            env.api.get(api_version, kind, name, namespace)
        except NotFound:
            continue
        found.append((kind, name))
    return found


def settled(env: Env) -> bool:
    cr = env.cr()
    status = cr.get("status") or {}
    return status.get("observedGeneration") == cr["metadata"]["generation"] and (
        (status.get("upgradeStatus") or {}).get("phase") in (None, "Idling", "Disabled")
    )


def apply(env: Env, spec: dict[str, Any]) -> None:
    env.api.apply(cluster_operator(spec), field_manager="helm")


def expected_pods(env: Env) -> int:
    """Every DaemonSet's scheduled pods, and one per Deployment."""
    total = 0
    for ds in env.api.list("apps/v1", "DaemonSet", namespace=NS).items:
        total += int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
    return total + len(env.api.list("apps/v1", "Deployment", namespace=NS).items)


def test_diff_predicts_what_an_edit_then_does(
    operator_env: Env, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    env = operator_env
    env.start_operator()
    apply(env, BASE)
    wait_for("the install settled", lambda: settled(env) and len(pods(env)) == expected_pods(env) > 0, timeout=120)

    code, same = predict(capsys, env, BASE)
    assert (code, same["objects"], same["restarts"], same["driver"]) == (cli_diff.EXIT_SAME, [], [], None), same

    # a global toleration: every workload's pods on their nodes
    tolerated = {**BASE, "tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]}
    code, told = predict(capsys, env, tolerated)
    assert code == cli_diff.EXIT_CHANGES
    predicted = {(r["workload"], n) for r in told["restarts"] for n in r["nodes"]}
    assert told["driver"]["mode"] == "all at once"
    predicted |= {("metax-driver", n) for n in told["driver"]["nodes"]}
    before = pods(env)
    assert predicted == set(before), predicted ^ set(before)  # every running pod of ours, on its node
    label = next(o for o in told["objects"] if o["name"] == "metax-gpu-label" and o["kind"] == "DaemonSet")
    assert "+        key: maintenance\n" in label["diff"], label["diff"]  # the server-side dry run's diff
    stored = dry_run(env, BASE, tolerated)
    apply(env, tolerated)
    try:
        wait_for("every predicted pod replaced", lambda: not not_replaced(env, before, predicted), timeout=180)
    except AssertionError:
        raise AssertionError(f"not replaced: {not_replaced(env, before, predicted)}") from None
    wait_for("settled", lambda: settled(env), timeout=60)
    for (kind, name), predicted_object in stored.items():  # each object as the dry run said it would be stored
        assert predicted_object is not None
        real = env.api.get(predicted_object["apiVersion"], kind, name, predicted_object["metadata"].get("namespace"))
        assert cli_diff.cleaned(real) == cli_diff.cleaned(predicted_object), (kind, name)

    # a component disabled: its objects deleted, its pods removed, nothing else restarted
    disabled = {**tolerated, "vfioManager": {"deploy": False}}
    code, told = predict(capsys, env, disabled)
    deleted = [
        (o["apiVersion"], o["kind"], o["name"], o["namespace"]) for o in told["objects"] if o["action"] == "delete"
    ]
    assert ("apps/v1", "DaemonSet", "metax-vfio-manager", NS) in deleted and code == cli_diff.EXIT_CHANGES
    assert [(r["workload"], r["action"]) for r in told["restarts"]] == [("metax-vfio-manager", "delete")]
    assert told["driver"] is None
    before = pods(env)
    apply(env, disabled)
    wait_for("the vfio-manager pods gone", lambda: not any(w == "metax-vfio-manager" for w, _ in pods(env)), 120)
    try:
        wait_for("every object predicted deleted gone", lambda: not still_there(env, deleted), timeout=60)
    except AssertionError:
        raise AssertionError(f"still there: {still_there(env, deleted)}") from None
    after = pods(env)
    assert {k: v for k, v in before.items() if k[0] != "metax-vfio-manager"} == after  # nothing else restarted

    # a driver bump with a rollout: the operator deletes the driver pods in the predicted loops
    with_policy = {**disabled, "driver": {**disabled["driver"], "upgradePolicy": POLICY}}
    apply(env, with_policy)
    wait_for("the policy reconciled", lambda: settled(env), timeout=60)
    bumped = {**with_policy, "driver": {**with_policy["driver"], "payload": {"version": "2.21.0"}}}
    code, told = predict(capsys, env, None, "driver.payload.version=2.21.0")
    assert code == cli_diff.EXIT_CHANGES and told["restarts"] == []
    assert told["driver"]["mode"] == "rollout"
    plan = [loop for step in told["driver"]["plan"] for loop in step]
    assert [len(step) for step in told["driver"]["plan"]] == [1, 1], told["driver"]
    stored = dry_run(env, with_policy, bumped)
    assert set(stored) == {("DaemonSet", "metax-driver")}
    recorder = DeletionRecorder(env.api, env.gpu_nodes).start()
    apply(env, bumped)
    loops = wait_for("both loops deleted", lambda: len(s := recorder.snapshot()) >= 2 and s, timeout=180)
    recorder.stop()
    assert [list(loop) for loop in loops[:2]] == plan, (loops, plan)
    wait_for("the rollout done", lambda: settled(env), timeout=120)
    real = env.api.get("apps/v1", "DaemonSet", "metax-driver", NS)
    assert cli_diff.cleaned(real) == cli_diff.cleaned(stored[("DaemonSet", "metax-driver")])  # as the dry run said

    # a bad value: refused by diff, and by the API server when applied
    code, told = predict(capsys, env, None, "driver.payload.versoin=2.22.0")
    assert code == cli_diff.EXIT_REFUSED
    assert any("driver.payload.versoin" in r for r in told["refused"]), told
    broken = {**bumped, "driver": {**bumped["driver"], "payload": {"version": "2.21.0", "versoin": "2.22.0"}}}
    with pytest.raises(ClusterError, match="versoin"):
        apply(env, broken)


def predict_driver_config(capsys: pytest.CaptureFixture[str], env: Env, path: pathlib.Path) -> tuple[int, Any]:
    args = ["diff", "--driver-config", str(path), "-o", "json", "--kubeconfig", str(env.kubeconfig)]
    capsys.readouterr()
    code = main.main(args)
    return code, json.loads(capsys.readouterr().out)


def kubectl(env: Env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The control plane's kubectl, with this environment's console scripts (kubectl-metax) on its PATH."""
    venv_bin = str(pathlib.Path(sys.executable).parent)
    return subprocess.run(
        [str(build.build(quiet=True).binary("kubectl")), *args, "--kubeconfig", str(env.kubeconfig)],
        check=False,
        input=stdin,
        env={**os.environ, "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def recorded_vfs(env: Env) -> dict[str, int]:
    """``status.vfNums`` on this test's GPU nodes: the count each gpu-device pod was started with."""
    recorded = (env.cr().get("status") or {}).get("vfNums") or {}
    return {node: recorded[node] for node in env.gpu_nodes if node in recorded}


def test_diff_predicts_what_a_driver_config_edit_then_does(
    operator_env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env = operator_env
    env.start_operator()
    apply(env, BASE)
    wait_for("the install settled", lambda: settled(env) and len(pods(env)) == expected_pods(env) > 0, timeout=120)
    wait_for("the VF counts recorded", lambda: recorded_vfs(env) == dict.fromkeys(env.gpu_nodes, 0), timeout=60)
    target = env.gpu_nodes[0]
    data = {
        "node-vfnums": f"nodes:\n  {target}:\n    vfnum: 4\n",
        "module-params": "xcore_page_size: 12\n",
        "node-module-params": "",
    }
    edit = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "driver-config", "namespace": NS}}
    path = env.log_dir / "driver-config.yaml"
    path.write_text(yaml.safe_dump({**edit, "data": data}))

    code, told = predict_driver_config(capsys, env, path)
    assert code == cli_diff.EXIT_CHANGES and told["refused"] == [] and told["driver"] is None, told
    assert [(r["workload"], r["action"], r["nodes"]) for r in told["restarts"]] == [
        ("metax-gpu-device", "update", [target])
    ]
    assert "VF count 0 → 4" in told["restarts"][0]["why"]
    by_node = {n["node"]: n for n in told["nodes"]}
    assert set(env.gpu_nodes + env.other_nodes) <= set(by_node)  # the parameter reaches every node
    assert "no driver-manager runs on this node" in by_node[env.other_nodes[0]]["driverManager"]
    assert by_node[target]["vfs"] == {"old": 0, "new": 4}
    assert by_node[env.gpu_nodes[1]]["vfs"] is None
    assert by_node[target]["params"] == {"old": {}, "new": {"xcore_page_size": "12"}}
    assert "reloads metax with xcore_page_size=12" in by_node[target]["driverManager"]
    assert "sets 4 VF(s) per GPU" in by_node[target]["driverManager"]
    [change] = told["objects"]
    assert (change["kind"], change["name"], change["action"]) == ("ConfigMap", "driver-config", "update")
    assert f"+      {target}:\n+        vfnum: 4\n" in change["diff"], change["diff"]  # the server's dry run

    # the same through kubectl's plugin lookup, the ConfigMap's data alone on stdin
    plugin = kubectl(env, "metax", "diff", "--driver-config", "-", "-o", "json", stdin=json.dumps(data))
    assert plugin.returncode == cli_diff.EXIT_CHANGES, plugin.stderr
    assert json.loads(plugin.stdout) == told

    body = diff_driver_config.manifest({**edit, "data": data}, NS)
    stored = env.api.apply(body, field_manager=diff_driver_config.FIELD_MANAGER, force=True, dry_run=True)
    before = pods(env)
    predicted = {("metax-gpu-device", target)}
    applied = kubectl(env, "apply", "--server-side", "--force-conflicts", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    try:
        wait_for("the predicted gpu-device pod replaced", lambda: not not_replaced(env, before, predicted), 120)
    except AssertionError:
        raise AssertionError(f"not replaced: {not_replaced(env, before, predicted)}") from None
    # the operator deletes every pod it recreates in the round that records the new counts: after that round
    # no other deletion is due
    wait_for("the new counts recorded", lambda: recorded_vfs(env) == {target: 4, env.gpu_nodes[1]: 0}, timeout=60)
    after = pods(env)
    assert {k: v for k, v in before.items() if k not in predicted} == {
        k: v for k, v in after.items() if k not in predicted
    }  # no other pod replaced
    real = env.api.get("v1", "ConfigMap", "driver-config", NS)
    assert cli_diff.cleaned(real) == cli_diff.cleaned(stored)  # stored as the dry run said

    code, told = predict_driver_config(capsys, env, path)
    assert (code, told["objects"], told["restarts"], told["nodes"]) == (cli_diff.EXIT_SAME, [], [], [])

    # a bad ConfigMap: refused naming each field, nothing sent
    bad = {"node-vfnums": f"nodes:\n  {target}:\n    vfnum: '8'\n", "module-param": "xcore_page_size: 12\n"}
    path.write_text(yaml.safe_dump({**edit, "data": bad}))
    code, told = predict_driver_config(capsys, env, path)
    assert code == cli_diff.EXIT_REFUSED
    assert any(r.startswith(f"data.node-vfnums.nodes.{target}.vfnum: ") for r in told["refused"]), told
    assert any(r.startswith("data.module-param: unknown key; did you mean 'module-params'") for r in told["refused"])
    plugin = kubectl(env, "metax", "diff", "--driver-config", str(path))
    assert plugin.returncode == cli_diff.EXIT_REFUSED and "data.module-param" in plugin.stderr, plugin.stderr
    assert cli_diff.cleaned(env.api.get("v1", "ConfigMap", "driver-config", NS)) == cli_diff.cleaned(stored)
