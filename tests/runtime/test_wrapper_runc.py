"""R-MACA at a real container start: the static wrapper ``metax-container-runtime`` in front of the harness's
REAL runc, the real container-edit service on its unix socket, SDK versions the real maca agent installed from
fake payload images (tests/runtime/conftest.py).

Aspects:
- a GPU container (METAX_VISIBLE_DEVICES) with ``METAX_MACA_VERSION=maca-2.18`` runs with MXMACA 2.18.0.3 at
  /opt/maca, read-only, its tools on PATH after the image's own, MACA_PATH set; the in-use record names it;
- ``maca-2`` picks the newest (numeric) match;
- ``maca-3`` (no match) and ``maca`` fail the start with the request and the installed versions on stderr, and
  no container exists afterwards;
- a non-GPU container runs untouched: config.json byte-identical, no call on the socket, even with the service
  down; a GPU container with the service down fails naming the socket;
- GC with a real runc container: a version no longer listed stays while a created container uses it and goes
  after ``runc delete``.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from metax_core.runtime import wrapper_conf

from .conftest import RuntimeHost

pytestmark = pytest.mark.realnode  # the harness's runc, root, namespaces (deselect with -m 'not realnode')

PROBE = (
    "echo PATH=$PATH; echo MACA_PATH=$MACA_PATH; maca-version; cat /opt/maca/version; touch /opt/maca/x 2>&1 || true"
)


def test_gpu_container_gets_the_sdk_its_prefix_chose(node: RuntimeHost) -> None:
    bundle = node.bundle(
        "gpu", ["sh", "-c", PROBE], ["METAX_VISIBLE_DEVICES=0000:09:00.0", "METAX_MACA_VERSION=maca-2.18"]
    )
    done = node.run(bundle, "gpu-1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "PATH=/bin:/usr/bin:/opt/maca/bin:/opt/maca/mxgpu_llvm/bin"
    assert lines[1] == "MACA_PATH=/opt/maca"
    assert lines[2:4] == ["MXMACA 2.18.0.3", "2.18.0.3"]
    assert "Read-only file system" in lines[4]
    record = json.loads((node.maca.store.in_use_dir / "gpu-1.json").read_text())
    assert record == {"container": "gpu-1", "version": "2.18.0.3", "stateDir": f"{node.runc_root}/gpu-1"}


def test_maca_2_picks_the_newest_numeric_match(node: RuntimeHost) -> None:
    bundle = node.bundle(
        "gpu", ["cat", "/opt/maca/version"], ["METAX_VISIBLE_DEVICES=0000:09:00.0", "METAX_MACA_VERSION=maca-2"]
    )
    done = node.run(bundle, "gpu-2")
    assert (done.returncode, done.stdout) == (0, "2.18.0.3\n"), done.stderr


def test_no_match_and_bare_maca_fail_the_start_visibly(node: RuntimeHost) -> None:
    for i, request in enumerate(("maca-3", "maca")):
        bundle = node.bundle(
            f"bad{i}", ["true"], ["METAX_VISIBLE_DEVICES=0000:09:00.0", f"METAX_MACA_VERSION={request}"]
        )
        done = node.run(bundle, f"bad-{i}")
        assert done.returncode != 0
        assert f"METAX_MACA_VERSION={request!r}" in done.stderr
        assert "2.18.0.3, 2.9.1" in done.stderr
        assert node.runc_cmd("state", f"bad-{i}").returncode != 0  # no container was created


def test_non_gpu_container_passes_untouched_without_the_service(node: RuntimeHost) -> None:
    bundle = node.bundle(
        "plain", ["sh", "-c", "echo $PATH; test -e /opt/maca || echo no-sdk"], ["METAX_MACA_VERSION=maca-2"]
    )
    before = (bundle / "config.json").read_bytes()
    served = node.editor.served
    node.stop_service()
    done = node.run(bundle, "plain-1")
    assert (done.returncode, done.stdout) == (0, "/bin:/usr/bin\nno-sdk\n"), done.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert node.editor.served == served


def test_gpu_container_with_the_service_down_fails_naming_the_socket(node: RuntimeHost) -> None:
    node.stop_service()
    bundle = node.bundle("gpu", ["true"], ["METAX_VISIBLE_DEVICES=0000:09:00.0"])
    done = node.run(bundle, "gpu-down")
    assert done.returncode != 0
    assert f"container-edit service at {node.socket} cannot be reached" in done.stderr


def test_gc_keeps_a_version_a_live_container_uses(node: RuntimeHost) -> None:
    bundle = node.bundle("gpu", ["sleep", "600"], ["METAX_VISIBLE_DEVICES=0000:09:00.0", "METAX_MACA_VERSION=maca-2.9"])
    created = node.run(bundle, "user-1", command="create")
    assert created.returncode == 0, created.stderr
    agent = node.maca_with("2.18.0.3")  # 2.9.1 is no longer listed
    agent.tick()
    assert sorted(p.name for p in node.sdk_dir.iterdir()) == ["2.18.0.3", "2.9.1"]
    assert node.runc_cmd("delete", "--force", "user-1").returncode == 0
    agent.chores.soon("sync")
    agent.tick()
    assert sorted(p.name for p in node.sdk_dir.iterdir()) == ["2.18.0.3"]
    assert not (node.maca.store.in_use_dir / "user-1.json").exists()


def test_runc_and_the_socket_come_from_the_conf_file_next_to_the_wrapper(node: RuntimeHost) -> None:
    """What the container-runtime agent installs: the wrapper and ``<wrapper>.conf`` naming runc and the socket
    (the runtime starts the wrapper with its own environment, without our variables)."""
    installed = node.tmp / "toolkit" / "metax-container-runtime"
    installed.parent.mkdir()
    shutil.copy2(node.wrapper, installed)
    settings = wrapper_conf.WrapperConf(socket=str(node.socket), runc=str(node.runc))
    pathlib.Path(wrapper_conf.path_of(str(installed))).write_text(wrapper_conf.render(settings))
    bundle = node.bundle(
        "gpu", ["cat", "/opt/maca/version"], ["METAX_VISIBLE_DEVICES=0000:09:00.0", "METAX_MACA_VERSION=maca-2.9"]
    )
    done = node.run(bundle, "conf-1", binary=installed)
    assert (done.returncode, done.stdout) == (0, "2.9.1\n"), done.stderr


def test_an_sgpu_container_carries_its_share_and_a_qos_policy(node: RuntimeHost) -> None:
    """R-SGPU's runtime side: the share gpu-device's Allocate set reaches the container, with the node's QoS policy
    filled in when the container carries none (default best-effort); an unknown policy fails the start."""
    share = ["METAX_VISIBLE_DEVICES=0000:09:00.0", "METAX_SGPU_SHARES=0000:09:00.0=4", "METAX_SGPU_SHARES_PER_GPU=16"]
    bundle = node.bundle("sgpu", ["sh", "-c", "env | grep ^METAX_SGPU | sort"], share)
    done = node.run(bundle, "sgpu-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "METAX_SGPU_QOS_POLICY=best-effort",
        "METAX_SGPU_SHARES=0000:09:00.0=4",
        "METAX_SGPU_SHARES_PER_GPU=16",
    ]
    bad = node.bundle("sgpu-bad", ["true"], [*share, "METAX_SGPU_QOS_POLICY=turbo"])
    refused = node.run(bad, "sgpu-2")
    assert refused.returncode != 0 and "'turbo' is not a QoS policy" in refused.stderr
