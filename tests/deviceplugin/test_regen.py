"""The checked-in gRPC code is exactly what the .proto and the pinned generator produce:

- regenerating gives byte-identical files;
- the .proto is upstream's (the services and messages kubelet uses, package ``v1beta1``, no gogoproto);
- pyproject's protobuf range starts at the generated code's protobuf version and stays below the next
  major, and grpcio-tools is pinned to the version that generated the code.
"""

from __future__ import annotations

import pathlib
import re
import tomllib

from metax_k8s.deviceplugin import regen
from metax_k8s.deviceplugin.v1beta1 import api_pb2

ROOT = pathlib.Path(regen.__file__).resolve().parents[2]
GENERATED = ROOT / "metax_k8s/deviceplugin/v1beta1"


def test_regenerating_gives_the_checked_in_files() -> None:
    assert regen.drifted() == []


def test_drift_is_detected(tmp_path: pathlib.Path) -> None:
    copy = tmp_path / regen.PROTO
    copy.parent.mkdir(parents=True)
    text = (ROOT / regen.PROTO).read_text().replace("message Empty {", "message Empty {\n\tstring added = 1;")
    copy.write_text(text)
    for name in regen.GENERATED:
        (copy.parent / name).write_bytes((GENERATED / name).read_bytes())
    assert sorted(regen.drifted(tmp_path)) == ["api_pb2.py", "api_pb2.pyi"]


def test_proto_is_upstream_kubelet_v1beta1() -> None:
    text = (ROOT / regen.PROTO).read_text()
    assert "gogo.proto" not in text and "(gogoproto." not in text
    assert "package v1beta1;" in text
    services = {s.name: sorted(m.name for m in s.methods) for s in api_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "Registration": ["Register"],
        "DevicePlugin": [
            "Allocate",
            "GetDevicePluginOptions",
            "GetPreferredAllocation",
            "ListAndWatch",
            "PreStartContainer",
        ],
    }
    assert api_pb2.DESCRIPTOR.package == "v1beta1"


def test_pyproject_versions_match_the_generated_code() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    gencode = re.search(r"Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", (GENERATED / "api_pb2.py").read_text())
    grpc_gen = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", (GENERATED / "api_pb2_grpc.py").read_text())
    assert gencode and grpc_gen
    major, minor, patch = gencode.groups()
    assert f"protobuf>={major}.{minor}.{patch},<{int(major) + 1}" in project["project"]["dependencies"]
    assert f"grpcio-tools=={grpc_gen.group(1)}" in project["project"]["optional-dependencies"]["test"]
