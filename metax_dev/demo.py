"""`./run demo`: the operator's decisions on simulated GPU nodes, no cluster needed.

It plays what an administrator sees: the spec is validated (and a broken one explained), the deploy plan and
workloads are rendered, the §3.2.8 canary rollout is planned for ten nodes, and three fake GPU hosts (real
sysfs adapter code on fake roots) are inventoried, given their VFs from the ``driver-config`` ConfigMap,
labelled, bound to vfio-pci where ``vfioConfig`` selects them, and shown with the device-plugin resources
they would advertise. Each step calls the same core functions and adapters as the components.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from metax_core.cluster import components, workloads
from metax_core.inventory import FunctionKind
from metax_core.node import devices, driver_config, labels, policy, vfio
from metax_core.spec import model as spec
from metax_core.spec import validation, vfio_config
from metax_dev import fakehost
from metax_hw_fake import host as fake_host
from services.cli import documents
from services.cli import main as cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

DRIVER_CONFIG = {
    "node-vfnums": "nodes:\n  gpu-node-3:\n    vfnum: 4\n",
    "module-params": "xcore_page_size: 10\n",
    "node-module-params": "worknode1:\n  xcore_page_size: 12\n",
}
PAYLOAD_VERSION = "2.14.6"
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
    _section(console, "4. Simulated GPU nodes: driver choice, VFs, labels, vfio-pci, device-plugin resources")
    wanted = validation.parse(documents.load_document(str(example)))
    config = driver_config.parse(DRIVER_CONFIG)
    table = Table("node", "GPUs", "driver", "VFs", "module params", "vfio-pci", "advertised")
    for name, gpus, host_driver in NODES:
        fake = fakehost.create(
            workdir / name, gpus, host_driver=host_driver, loaded=False, payload_drivers=[PAYLOAD_VERSION]
        )
        table.add_row(*_node_row(name, fake, wanted, config))
    console.print(table)
    console.print("Labels of gpu-node-3 (R-LABELS):")
    fake = fake_host.FakeHost.open(workdir / "gpu-node-3")
    inventory = labels.NodeInventory(node_name="gpu-node-3", functions=tuple(fake.hw.devices.functions()))
    console.print({k: v for k, v in labels.node_labels(inventory).items() if v is not None})


def _node_row(
    name: str, fake: fake_host.FakeHost, wanted: spec.ClusterOperatorSpec, config: driver_config.DriverConfig
) -> list[str]:
    hw = fake.hw
    choice = policy.choose_driver(
        wanted.driver.deploy_policy, hw.modules.installed_version("metax"), wanted.driver.payload.version
    )
    node_config = driver_config.for_node(config, name)
    if choice.source is policy.DriverSource.HOST:
        hw.modules.load("metax", node_config.module_params)
    elif choice.source is policy.DriverSource.PAYLOAD:
        hw.modules.load_file(f"/var/lib/metax/drivers/{choice.version}/metax.ko", node_config.module_params)
    vf_plan = driver_config.vf_count_plan(hw.devices.functions(), node_config.vfnum)
    for write in vf_plan.writes:
        hw.binder.set_vf_count(write.pf, node_config.vfnum)
    selection = vfio_config.selection_for_node(wanted.vfio_manager.vfio_config, name)
    binding = vfio.plan(hw.devices.functions(), selection)
    results = {}
    if binding.to_vfio and hw.modules.state("vfio_pci") is None:
        hw.modules.load("vfio-pci", {})
    for address in binding.to_vfio:
        hw.binder.bind(address, "vfio-pci")
        results[binding.index_of[address]] = True
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
    params = ", ".join(f"{k}={v}" for k, v in node_config.module_params.items()) or "-"
    annotation = vfio.annotation_value(results) if results else "-"
    return [
        name,
        str(len([f for f in functions if f.kind is FunctionKind.PF])),
        f"{choice.source.value} {choice.version or ''}",
        str(vfs),
        params,
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
