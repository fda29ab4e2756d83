"""Create a fake MetaX host root for manual experiments and the demo.

Why: developers and the demo need a node with GPUs without owning one. This builds the same fake host the
tests use (`metax_hw_fake.builder`) under a directory of your choice; point node agents at it with
``--host-root DIR`` and put ``DIR/.metax-fake/bin`` first on their PATH (or use
`metax_hw_fake.host.FakeHost.open(DIR)` in Python).

    python -m metax_dev.fakehost --root /tmp/node1 --gpus 8 --vfs 0 --host-driver 2.18.0
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from metax_hw_fake import builder
from metax_hw_fake.host import FakeHost

logger = logging.getLogger(__name__)


def create(
    root: Path,
    gpus: int,
    *,
    vfs: int = 0,
    host_driver: str | None = "2.18.0",
    loaded: bool = True,
    model: str = "C500",
    numa_nodes: int = 2,
    switches: int = 2,
    sriov_totalvfs: int = 16,
    vbios: str = "1.13.0.0",
    iommu: bool = True,
    vfio: bool = False,
    nics: Sequence[str] = ("ens1f0",),
    payload_drivers: Sequence[str] = (),
    firmware_images: Sequence[str] = (),
) -> FakeHost:
    """Build a fake host with ``gpus`` GPUs under ``root`` (which must not already hold a host tree)."""
    spec = (
        builder.FakeHostBuilder()
        .gpus(gpus, model=model, numa_nodes=numa_nodes, switches=switches, sriov_totalvfs=sriov_totalvfs)
        .host_driver(host_driver, loaded=loaded)
        .vbios(vbios)
        .iommu(iommu)
        .vfio(vfio)
        .vfs(vfs)
        .nics(*(builder.NicSpec(name, switch=i) for i, name in enumerate(nics)))
    )
    for version in payload_drivers:
        spec.payload_driver(version)
    for version in firmware_images:
        spec.firmware_image(version)
    return spec.build(root)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m metax_dev.fakehost", description="Create a fake MetaX host root.")
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fake host's options, shared by ``python -m metax_dev.fakehost`` and ``metax-dev fake-host``."""
    parser.add_argument("--root", type=Path, required=True, help="directory to create the host tree in")
    parser.add_argument("--gpus", type=int, default=8, help="number of MetaX GPUs (default 8)")
    parser.add_argument("--vfs", type=int, default=0, help="VFs to enable on every GPU at boot (default 0)")
    parser.add_argument(
        "--host-driver", default="2.18.0", help="version of the driver installed on the host; 'none' for no host driver"
    )
    parser.add_argument("--not-loaded", action="store_true", help="install the host driver but do not load it")
    parser.add_argument("--model", default="C500")
    parser.add_argument("--numa-nodes", type=int, default=2)
    parser.add_argument("--switches", type=int, default=2)
    parser.add_argument("--sriov-totalvfs", type=int, default=16, help="0: non-virtualisation firmware")
    parser.add_argument("--vbios", default="1.13.0.0")
    parser.add_argument("--no-iommu", action="store_true")
    parser.add_argument("--vfio", action="store_true", help="load vfio-pci at boot")
    parser.add_argument("--nic", action="append", default=None, help="a NIC name (repeatable; default ens1f0)")
    parser.add_argument(
        "--payload-driver",
        action="append",
        default=[],
        metavar="VERSION",
        help="put a payload driver module under /var/lib/metax/drivers/VERSION/",
    )
    parser.add_argument(
        "--firmware-image",
        action="append",
        default=[],
        metavar="VERSION",
        help="put a VBIOS image under /lib/firmware/metax/<model>/",
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run(_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Create the fake host the parsed options describe and print how to use it."""
    host_driver = None if args.host_driver.lower() == "none" else args.host_driver
    try:
        fake = create(
            args.root,
            args.gpus,
            vfs=args.vfs,
            host_driver=host_driver,
            loaded=not args.not_loaded,
            model=args.model,
            numa_nodes=args.numa_nodes,
            switches=args.switches,
            sriov_totalvfs=args.sriov_totalvfs,
            vbios=args.vbios,
            iommu=not args.no_iommu,
            vfio=args.vfio,
            nics=args.nic if args.nic is not None else ("ens1f0",),
            payload_drivers=args.payload_driver,
            firmware_images=args.firmware_image,
        )
    except (OSError, ValueError) as exc:
        print(f"cannot create the fake host: {exc}", file=sys.stderr)
        return 1
    print("\n".join(fake.describe()))
    print(f"export PATH={fake.bin_dir}:$PATH   # to run the fake modprobe/mx-smi by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
