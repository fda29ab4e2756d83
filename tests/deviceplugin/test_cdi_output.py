"""The CDI spec file gpu-device writes under ``<host root>/var/run/cdi``:

- valid by the CDI spec's rules (our own checks in `cdi_rules`), one device per GPU with its device nodes;
- every CDI name Allocate returns is defined in it;
- rewritten (atomically, no temporary file left) when the GPUs change, and removed when the agent stops;
- a spec carrying something the rules refuse is caught by the checks (they can fail).
"""

from __future__ import annotations

import json

from .cdi_rules import problems
from .conftest import Node

GPU = "metax-tech.com/gpu"
ALL = {"0000:09:00.0", "0000:0a:00.0", "0000:89:00.0", "0000:8a:00.0"}


def test_written_spec_is_valid_and_defines_every_allocated_name(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)

    spec = json.loads(node.cdi_path.read_text())
    assert problems(spec) == []
    assert spec["kind"] == "metax-tech.com/gpu"
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["devices"][0] == {
        "name": "0000-09-00.0",
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/dri/card0"}, {"path": "/dev/dri/renderD128"}, {"path": "/dev/mxcd"}]
        },
    }
    defined = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    [response] = node.kubelet.allocate(GPU, sorted(ALL)).container_responses
    assert {c.name for c in response.cdi_devices} == defined
    assert oct(node.cdi_path.stat().st_mode & 0o777) == "0o644"


def test_spec_follows_the_gpus_and_leaves_no_temporary_files(node: Node) -> None:
    node.start()
    node.kubelet.wait_for(lambda: node.kubelet.healthy(GPU) == ALL)
    node.inventory.set(node.inventory.present[:1])
    node.kubelet.wait_for(lambda: len(json.loads(node.cdi_path.read_text())["devices"]) == 1, what="a rewrite")

    assert sorted(p.name for p in node.cdi_path.parent.iterdir()) == ["metax-tech.com-gpu.json"]
    node.stop_agent()
    assert list(node.cdi_path.parent.iterdir()) == []


def test_rules_refuse_what_the_cdi_spec_refuses() -> None:
    good = {"cdiVersion": "0.5.0", "kind": "metax-tech.com/gpu", "devices": [{"name": "0", "containerEdits": {}}]}
    assert problems(good) == []
    assert problems({**good, "cdiVersion": "0.4.0"}) == ["device name '0' starts with a digit: needs cdiVersion 0.5.0"]
    assert problems({**good, "cdiVersion": "2.0.0"}) == ["cdiVersion '2.0.0' is not a released version"]
    assert problems({**good, "kind": "gpu"}) == ["kind 'gpu' is not vendor/class"]
    assert problems({**good, "kind": "Metax.com/gpu"}) == ["vendor 'Metax.com' is not a DNS subdomain"]
    assert problems({**good, "devices": []}) == ["a spec needs at least one device"]
    assert problems({**good, "extra": 1}) == ["unknown field extra"]
    assert problems({**good, "devices": [{"name": "-a", "containerEdits": {}}]}) == ["device name '-a' is invalid"]
    bad_node = {"name": "a", "containerEdits": {"deviceNodes": [{"path": "dev/x", "mode": 1}]}}
    assert sorted(problems({**good, "devices": [bad_node]})) == [
        "device a: device node path 'dev/x' is not absolute",
        "device a: unknown device node field mode",
    ]
