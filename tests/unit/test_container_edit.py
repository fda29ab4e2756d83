"""The edit a MetaX container gets at its start (`metax_core.runtime.container_edit`, R-MACA, R-SGPU).

Aspects: a non-MetaX container is untouched (even with METAX_MACA_VERSION); a MetaX one gets the newest
installed match of its prefix, mounted read-only with its environment; ``maca``, ``maca-``, malformed prefixes
and no match are refusals naming the request and the installed versions; the resolver is `versions.resolve`
(hypothesis: the mounted version is resolve's answer); CDI device edits are applied only when missing, only
from CDI annotations; sGPU QoS filled from the node or refused when unknown.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core import versions
from metax_core.node import cdi, devices
from metax_core.runtime import container_edit, sdk

INSTALLED = tuple(versions.parse(v) for v in ("2.18.0.10", "2.18.0.3", "2.9.1"))
INPUTS = container_edit.Inputs(installed=INSTALLED)


def config(*env: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "process": {"args": ["sh"], "env": ["PATH=/usr/bin:/bin", *env]},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {},
    }
    if annotations:
        c["annotations"] = annotations
    return c


GPU = "METAX_VISIBLE_DEVICES=0000:09:00.0"


def test_a_container_without_metax_devices_is_untouched() -> None:
    original = config("METAX_MACA_VERSION=maca-2")
    got = container_edit.edit(original, INPUTS)
    assert got.changed is False and got.config is original and got.maca is None


def test_a_gpu_container_gets_the_newest_match_read_only_with_env() -> None:
    got = container_edit.edit(config(GPU, "METAX_MACA_VERSION=maca-2.18"), INPUTS)
    assert got.changed and got.maca == versions.parse("2.18.0.10")
    assert got.config["mounts"][-1] == sdk.mount(sdk.HOST_DIR, versions.parse("2.18.0.10"))
    env = got.config["process"]["env"]
    assert env[0] == "PATH=/usr/bin:/bin:/opt/maca/bin:/opt/maca/mxgpu_llvm/bin"
    assert "MACA_PATH=/opt/maca" in env and "METAX_MACA_RESOLVED=2.18.0.10" in env


def test_a_gpu_container_without_a_request_gets_no_sdk() -> None:
    got = container_edit.edit(config(GPU), INPUTS)
    assert got.changed is False and got.maca is None


@pytest.mark.parametrize("request_", ["maca", "maca-", "maca-2.x", "2.18", "maca-2..1"])
def test_bad_prefixes_are_refused_naming_request_and_installed(request_: str) -> None:
    with pytest.raises(container_edit.Refusal) as caught:
        container_edit.edit(config(GPU, f"METAX_MACA_VERSION={request_}"), INPUTS)
    assert repr(request_) in caught.value.message
    assert "2.18.0.10, 2.18.0.3, 2.9.1" in caught.value.message


def test_no_match_is_refused_never_a_fallback() -> None:
    with pytest.raises(container_edit.Refusal, match=r"'maca-3'.*no installed MXMACA version matches.*2\.9\.1"):
        container_edit.edit(config(GPU, "METAX_MACA_VERSION=maca-3"), INPUTS)
    with pytest.raises(container_edit.Refusal, match=r"installed on this node: none"):
        container_edit.edit(config(GPU, "METAX_MACA_VERSION=maca-2"), container_edit.Inputs())


def test_an_image_mounting_opt_maca_itself_is_refused() -> None:
    c = config(GPU, "METAX_MACA_VERSION=maca-2")
    c["mounts"].append({"destination": "/opt/maca/", "type": "bind", "source": "/x"})
    with pytest.raises(container_edit.Refusal, match="already mounts /opt/maca"):
        container_edit.edit(c, INPUTS)


def test_the_input_is_not_modified() -> None:
    c = config(GPU, "METAX_MACA_VERSION=maca-2")
    before = copy.deepcopy(c)
    container_edit.edit(c, INPUTS)
    assert c == before


_V = st.lists(st.integers(0, 20), min_size=1, max_size=4).map(lambda ns: versions.Version(tuple(ns)))


@given(have=st.sets(_V, min_size=1, max_size=6), data=st.data())
def test_the_mounted_version_is_what_resolve_answers(have: set[versions.Version], data: st.DataObject) -> None:
    pick = data.draw(st.sampled_from(sorted(have)))
    prefix = pick.numbers[: data.draw(st.integers(1, len(pick.numbers)))]
    request = "maca-" + ".".join(map(str, prefix))
    got = container_edit.edit(
        config(GPU, f"METAX_MACA_VERSION={request}"), container_edit.Inputs(installed=tuple(have))
    )
    assert got.maca == versions.resolve(request, [str(v) for v in have])
    assert got.config["mounts"][-1]["source"].endswith("/" + sdk.version_dir(got.maca))


SPEC = cdi.build_spec([cdi.CdiDevice("0000-09-00.0", ("/dev/dri/card0", "/dev/mxcd"))])
INFO = {"/dev/dri/card0": container_edit.DeviceInfo("c", 226, 0), "/dev/mxcd": container_edit.DeviceInfo("c", 240, 1)}
CDI_ANNOTATION = {"cdi.k8s.io/metax-gpu-device_0": "metax-tech.com/gpu=0000-09-00.0"}


def test_cdi_device_edits_are_applied_when_missing() -> None:
    inputs = container_edit.Inputs(cdi_spec=SPEC, device_info=INFO)
    got = container_edit.edit(config(annotations=CDI_ANNOTATION), inputs)
    assert [d["path"] for d in got.config["linux"]["devices"]] == ["/dev/dri/card0", "/dev/mxcd"]
    assert {"allow": True, "type": "c", "major": 226, "minor": 0, "access": "rwm"} in got.config["linux"]["resources"][
        "devices"
    ]
    again = container_edit.edit(got.config, inputs)  # a runtime that injected them already: nothing changes
    assert again.changed is False


def test_an_unknown_cdi_device_is_refused() -> None:
    c = config(annotations={"cdi.k8s.io/x": "metax-tech.com/gpu=0000-0a-00.0"})
    with pytest.raises(container_edit.Refusal, match="metax-tech.com/gpu=0000-0a-00.0 are not in this node's CDI spec"):
        container_edit.edit(c, container_edit.Inputs(cdi_spec=SPEC, device_info=INFO))


def test_devices_never_come_from_the_environment() -> None:
    got = container_edit.edit(config(GPU), container_edit.Inputs(cdi_spec=SPEC, device_info=INFO))
    assert "devices" not in got.config["linux"]


def test_sgpu_qos_filled_from_the_node_or_refused_when_unknown() -> None:
    shares = f"{devices.SHARES_ENV}=0000:09:00.0=4"
    inputs = container_edit.Inputs(node_qos=devices.QosPolicy.FIXED_SHARE)
    got = container_edit.edit(config(GPU, shares), inputs)
    assert f"{devices.QOS_ENV}=fixed-share" in got.config["process"]["env"]
    kept = container_edit.edit(config(GPU, shares, f"{devices.QOS_ENV}=burst-share"), inputs)
    assert kept.changed is False
    with pytest.raises(
        container_edit.Refusal, match="'turbo' is not a QoS policy.*best-effort, fixed-share, burst-share"
    ):
        container_edit.edit(config(GPU, shares, f"{devices.QOS_ENV}=turbo"), inputs)
