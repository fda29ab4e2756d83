"""`metax_core.node.cdi`: the CDI spec document gpu-device writes.

- names: PCI address → CDI device name, qualified names, file name per kind;
- build_spec: one device per entry with its device nodes; None when there is nothing to describe;
- every bad name, kind, duplicate or relative path is refused at once (InvalidSpec);
- minimum_version follows the CDI library's feature table (0.3.0 … 1.1.0), and is a known version;
- render is stable (sorted keys) so an unchanged spec is not rewritten.
"""

from __future__ import annotations

import json

import pytest

from metax_core.errors import InvalidSpec
from metax_core.node import cdi


def test_names() -> None:
    assert cdi.device_name("0000:09:00.0") == "0000-09-00.0"
    assert cdi.qualified_name("0000-09-00.0") == "metax-tech.com/gpu=0000-09-00.0"
    assert cdi.spec_file_name() == "metax-tech.com-gpu.json"


def test_build_spec() -> None:
    spec = cdi.build_spec([cdi.CdiDevice("0000-09-00.0", ("/dev/dri/card0", "/dev/mxcd")), cdi.CdiDevice("gpu1")])
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": "metax-tech.com/gpu",
        "devices": [
            {
                "name": "0000-09-00.0",
                "containerEdits": {"deviceNodes": [{"path": "/dev/dri/card0"}, {"path": "/dev/mxcd"}]},
            },
            {"name": "gpu1", "containerEdits": {"deviceNodes": []}},
        ],
    }
    assert cdi.build_spec([]) is None


def test_every_problem_is_refused_at_once() -> None:
    with pytest.raises(InvalidSpec) as caught:
        cdi.build_spec(
            [cdi.CdiDevice("a:b"), cdi.CdiDevice("ok", ("dev/x",)), cdi.CdiDevice("ok")], kind="Bad_Vendor/gpu"
        )
    assert [e.path for e in caught.value.errors] == [
        "kind",
        "devices[0].name",
        "devices[1].containerEdits.deviceNodes",
        "devices[2].name",
    ]
    assert "'ok' is used twice" in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "ok"),
    [
        ("metax-tech.com/gpu", True),
        ("vendor.com/foo-bar123.B_az", True),
        ("gpu", False),
        ("vendor.com/", False),
        ("vendor.com/foo/bar", False),
        ("-vendor.com/gpu", False),
        ("vendor.com/" + "a" * 64, False),
    ],
)
def test_kind_rules(kind: str, ok: bool) -> None:
    assert (cdi.kind_errors(kind) == []) is ok


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        ({"kind": "v.com/c", "devices": [{"name": "a", "containerEdits": {}}]}, "0.3.0"),
        ({"kind": "v.com/c", "devices": [{"name": "a", "containerEdits": {"mounts": [{"type": "bind"}]}}]}, "0.4.0"),
        ({"kind": "v.com/c", "devices": [{"name": "0", "containerEdits": {}}]}, "0.5.0"),
        (
            {
                "kind": "v.com/c",
                "devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"path": "/d", "hostPath": "/e"}]}}],
            },
            "0.5.0",
        ),
        ({"kind": "v.com/c.x", "devices": [{"name": "a"}]}, "0.6.0"),
        ({"kind": "v.com/c", "annotations": {"a": "b"}, "devices": [{"name": "a"}]}, "0.6.0"),
        ({"kind": "v.com/c", "containerEdits": {"additionalGids": [5]}, "devices": [{"name": "a"}]}, "0.7.0"),
        ({"kind": "v.com/c", "containerEdits": {"intelRdt": {"closID": "x"}}, "devices": [{"name": "a"}]}, "0.7.0"),
        (
            {
                "kind": "v.com/c",
                "devices": [{"name": "a", "containerEdits": {"netDevices": [{"hostInterfaceName": "e"}]}}],
            },
            "1.1.0",
        ),
    ],
)
def test_minimum_version(spec: dict[str, object], version: str) -> None:
    assert cdi.minimum_version(spec) == version
    assert version in cdi.KNOWN_VERSIONS


def test_render_is_stable() -> None:
    spec = cdi.build_spec([cdi.CdiDevice("a", ("/dev/x",))])
    assert spec is not None
    text = cdi.render(spec)
    assert text == cdi.render(json.loads(text))
    assert text.endswith("\n") and text.index('"cdiVersion"') < text.index('"kind"')
