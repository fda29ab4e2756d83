"""modinfo parsing and module parameter handling in the kmod adapter.

Aspects covered: modinfo fields (repeated parm/alias lines), parameter names and descriptions, the
kernel's spellings of a parameter value (Y/1, hex), parameter formatting refusals, and that any text either
parses or raises HardwareError.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core import errors
from metax_hw import kmod

MODINFO = """\
filename:       /lib/modules/5.15.0-91-generic/updates/dkms/metax.ko
version:        2.18.0
license:        GPL
description:    MetaX GPU driver
alias:          pci:v00009999d00004000sv*sd*bc*sc*i*
alias:          pci:v00009999d00004001sv*sd*bc*sc*i*
depends:        drm,drm_kms_helper
name:           metax
vermagic:       5.15.0-91-generic SMP mod_unload modversions
parm:           xcore_page_size:xcore page size in KiB (int)
parm:           gpu_model:force the GPU model (charp)
sig_hashalgo:   sha256
"""


def test_fields_and_params() -> None:
    fields = kmod.parse_modinfo(MODINFO, "metax")
    assert fields["version"] == ["2.18.0"] and len(fields["alias"]) == 2
    assert fields["depends"] == ["drm,drm_kms_helper"]
    assert kmod.module_params_of(fields) == {
        "xcore_page_size": "xcore page size in KiB (int)",
        "gpu_model": "force the GPU model (charp)",
    }


def test_not_modinfo_output() -> None:
    with pytest.raises(errors.HardwareError, match="modinfo printed no module fields"):
        kmod.parse_modinfo("modinfo: ERROR: Module metax not found.\n", "metax")


@pytest.mark.parametrize(
    ("asked", "seen", "same"),
    [
        ("12", "12", True),
        ("1", "Y", True),
        ("off", "N", True),
        ("0x10", "16", True),
        ("12", "10", False),
        ("abc", "abd", False),
        ("y", "0", False),
    ],
)
def test_kernel_spellings(asked: str, seen: str, same: bool) -> None:
    assert kmod.same_param_value(asked, seen) is same


def test_format_params_refuses_what_the_kernel_would_mangle() -> None:
    assert kmod.format_params("metax", {"b": "2", "a": "1"}, "load") == ["a=1", "b=2"]
    with pytest.raises(errors.HardwareError, match="'x-y' is not a module parameter name"):
        kmod.format_params("metax", {"x-y": "1"}, "load")
    with pytest.raises(errors.HardwareError, match="empty or contains spaces"):
        kmod.format_params("metax", {"a": ""}, "load")


def test_module_names() -> None:
    assert kmod.sysfs_module_name("vfio-pci") == "vfio_pci"
    assert kmod.module_name_of_file("/var/lib/metax/drivers/2.19/metax.ko.zst") == "metax"


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_any_text_parses_or_is_a_hardware_error(text: str) -> None:
    try:
        fields = kmod.parse_modinfo(text, "metax")
    except errors.HardwareError:
        return
    kmod.module_params_of(fields)
    assert fields.get("filename") or fields.get("name")
