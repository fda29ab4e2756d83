"""`./run demo`: the operator's decisions on simulated GPU nodes, no cluster needed.

It plays what an administrator sees: the spec is validated (and a broken one explained), the deploy plan and
workloads are rendered, the §3.2.8 canary rollout is planned for ten nodes, and three fake GPU hosts (real
sysfs adapter code on fake roots) are inventoried, given their VFs from the ``driver-config`` ConfigMap,
labelled, bound to vfio-pci where ``vfioConfig`` selects them, and shown with the device-plugin resources
they would advertise. The nodes are brought up by the node agents' own rounds (driver-manager, vfio-manager,
gpu-label) against an in-memory cluster holding the ConfigMaps: the demo has no copy of their apply steps.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from metax_core.cluster import components, configmaps, workloads
from metax_core.inventory import FunctionKind
from metax_core.node import devices, vfio
from metax_core.node import driver_config as driver_config_format
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_core.wire import meta
from metax_dev import agents, fakehost
from metax_hw_fake import host as fake_host
from metax_k8s.inmemory.cluster import InMemoryCluster
from services._agent import cluster as agent_cluster
from services.cli import documents
from services.cli import main as cli
from services.driver_manager import agent as driver_agent
from services.driver_manager import bootstrap as driver_bootstrap
from services.driver_manager import config as driver_config
from services.gpu_label import agent as label_agent
from services.gpu_label import bootstrap as label_bootstrap
from services.gpu_label import config as label_config
from services.vfio_manager import agent as vfio_agent
from services.vfio_manager import bootstrap as vfio_bootstrap
from services.vfio_manager import config as vfio_settings

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

DRIVER_CONFIG = {
    driver_config_format.NODE_VFNUMS: "nodes:\n  gpu-node-3:\n    vfnum: 4\n",
    driver_config_format.MODULE_PARAMS: "xcore_page_size: 10\n",
    driver_config_format.NODE_MODULE_PARAMS: "worknode1:\n  xcore_page_size: 12\n",
}
PAYLOAD_VERSION = "2.14.6"
NAMESPACE = "metax-operator"
NODES = (
    # name, GPUs, host driver installed
    ("worknode1", 8, "2.12.0"),
    ("worknode2", 4, None),
    ("gpu-node-3", 2, "2.16.1"),
)


def _section(console: Console, title: str) -> None:
    console.print()
    console.rule(f"[bold]{title}")


def show_validation(console: Console, example: Path) -> None:
    _section(console, "1. Validate the ClusterOperator (metax-operator validate)")
    console.print(f"$ metax-operator validate -f {example.name}")
    cli.main(["validate", "-f", str(example)])
    console.print("$ metax-operator validate -f invalid.yaml   # every problem at once, with its field path")
    cli.main(["validate", "-f", str(EXAMPLES / "invalid.yaml")])


def show_plan(console: Console, example: Path) -> None:
    _section(console, "2. Deploy plan and workloads (R-DEP, R-SECURITY)")
    wanted = validation.parse(documents.load_document(str(example)))
    rendered = workloads.render(wanted)
    table = Table("component", "workloads", "prerequisites", "decision")
    blocked = {b.component: b.reason for b in rendered.plan.blocked}
    for info in components.CATALOGUE:
        c = info.component
        decision = "deploy" if c in rendered.plan.deploy else blocked.get(c, "disabled")
        table.add_row(
            c.value,
            ", ".join(w.name for w in info.workloads),
            ", ".join(p.value for p in info.prerequisites) or "-",
            decision,
        )
    console.print(table)


def show_rollout(console: Console, example: Path) -> None:
    _section(console, "3. Driver canary rollout of §3.2.8 on 10 nodes (metax-operator rollout plan)")
    console.print(f"$ metax-operator rollout plan -f {example.name} --nodes 10")
    cli.main(["rollout", "plan", "-f", str(example), "--nodes", "10"])
    console.print(f"$ metax-operator rollout plan -f {example.name} --nodes 10 --fail node-02 -o json")
    cli.main(["rollout", "plan", "-f", str(example), "--nodes", "10", "--fail", "node-02", "-o", "json"])


def show_nodes(console: Console, example: Path, workdir: Path) -> None:
    _section(console, "4. Simulated GPU nodes: the node agents' own rounds (driver-manager, gpu-label, vfio-manager)")
    wanted = validation.parse(documents.load_document(str(example)))
    k8s = InMemoryCluster()
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, field_manager="demo")
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="demo")
    # The ConfigMaps exactly as the operator renders them (`configmaps`): what the agents read is what the
    # operator writes. driver-config is then edited as an administrator would (R-VF, R-MODPARAM).
    driver_cm = configmaps.driver_config_map(NAMESPACE)
    for manifest in (
        {**driver_cm, "data": {**driver_cm["data"], **DRIVER_CONFIG}},
        configmaps.vfio_config_map(wanted, NAMESPACE),
    ):
        k8s.objects.apply(manifest, field_manager=meta.MANAGED_BY)
    table = Table("node", "GPUs", "driver", "VFs", "module params", "vfio-pci", "advertised")
    for name, gpus, host_driver in NODES:
        k8s.add_node(name)
        fake = fakehost.create(workdir / name, gpus, host_driver=host_driver, loaded=False)
        payload = agents.write_payload(workdir / f"{name}-payload", PAYLOAD_VERSION)  # the driver image's files
        table.add_row(*_node_row(name, fake, payload, wanted, k8s))
    console.print(table)
    console.print("Labels of gpu-node-3 (R-LABELS), as gpu-label published them:")
    node = k8s.objects.get("v1", "Node", "gpu-node-3") or {}
    console.print({k: v for k, v in (node["metadata"].get("labels") or {}).items() if k.startswith("metax-tech.com/")})


def _node_row(
    name: str, fake: fake_host.FakeHost, payload: Path, wanted: spec.ClusterOperatorSpec, k8s: InMemoryCluster
) -> list[str]:
    """One node brought up by the agents' own rounds, in the order the readiness gates allow."""
    driver = driver_bootstrap.bootstrap(
        driver_config.Settings(
            node_name=name,
            host_root=fake.root,
            namespace=NAMESPACE,
            deploy_policy=wanted.driver.deploy_policy,
            payload_version=wanted.driver.payload.version,
            payload_dir=str(payload),
            fw_upgrade_policy=wanted.driver.fw_upgrade_policy,
            fw_enable_virt=wanted.driver.fw_enable_virt,
            host_module_tools=False,
        ),
        hw=driver_agent.Hardware.of(fake.hw),
        ports=agent_cluster.in_memory(k8s, "driver", name),
    )
    labeller = label_bootstrap.bootstrap(
        label_config.Settings(
            node_name=name, host_root=fake.root, namespace=NAMESPACE, sgpu_shares=wanted.gpu_device.sgpu_shares
        ),
        hw=label_agent.Hardware.of(fake.hw),
        ports=agent_cluster.in_memory(k8s, "gpu-label", name),
    )
    binder = vfio_bootstrap.bootstrap(
        vfio_settings.Settings(node_name=name, host_root=fake.root, namespace=NAMESPACE),
        hw=vfio_agent.Hardware.of(fake.hw),
        ports=agent_cluster.in_memory(k8s, "vfio-manager", name),
    )
    driver.tick()
    binder.tick()
    labeller.tick()
    outcome = driver.outcome
    hw = fake.hw
    functions = hw.devices.functions()
    plan = devices.plan_devices(
        functions,
        settings=devices.NodeSettings(),
        shares=wanted.gpu_device.sgpu_shares,
        health={},
        iommu_enabled=hw.devices.iommu_enabled(),
    )
    advertised = ", ".join(f"{r.value}={len(d)}" for r, d in sorted(plan.devices.items(), key=lambda i: i[0].value))
    vfs = sum(1 for f in functions if f.kind is FunctionKind.VF)
    params = hw.modules.state("metax")
    shown = ", ".join(
        f"{k}={v}" for k, v in sorted((params.params if params else {}).items()) if k == "xcore_page_size"
    )
    node = k8s.objects.get("v1", "Node", name) or {}
    annotation = (node["metadata"].get("annotations") or {}).get(vfio.ANNOTATION, "-")
    choice = outcome.plan.choice if outcome is not None and outcome.plan is not None else None
    return [
        name,
        str(len([f for f in functions if f.kind is FunctionKind.PF])),
        f"{choice.source.value} {choice.version or ''}" if choice else "-",
        str(vfs),
        shown or "-",
        annotation,
        advertised or "-",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="metax-demo", description=__doc__)
    parser.add_argument("-f", "--file", type=Path, default=EXAMPLES / "cluster-operator.yaml")
    args = parser.parse_args(argv)
    console = Console(width=150) if not Console().is_terminal else Console()
    console.print("[bold]MetaX GPU Operator demo[/bold]: the spec, the plan, a canary rollout, three fake GPU nodes")
    show_validation(console, args.file)
    show_plan(console, args.file)
    show_rollout(console, args.file)
    with tempfile.TemporaryDirectory(prefix="metax-demo-") as tmp:
        show_nodes(console, args.file, Path(tmp))
    console.print()
    console.print("Done. " + json.dumps({"nodes": len(NODES)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
