"""metax_core.metrics.sources (R-EXPORTER, C8): which telemetry source the exporter uses, decided once at start.

Aspects: the first library path present wins, in the setting's order; none present, or an empty setting, means
mx-smi; relative paths are refused naming the setting; a library that cannot be used falls back with its reason.
"""

from __future__ import annotations

import pytest

from metax_core.errors import InvalidSpec
from metax_core.metrics import sources


def test_the_first_present_library_wins_in_the_settings_order() -> None:
    present = {"/opt/maca/lib/libmxsml.so", "/opt/mxn100/lib/libmxsml.so"}
    choice = sources.choose(sources.DEFAULT_LIBRARIES, present)
    assert choice == sources.Choice("/opt/maca/lib/libmxsml.so", "telemetry from libmxsml at /opt/maca/lib/libmxsml.so")


def test_no_library_present_or_none_asked_means_mx_smi() -> None:
    missing = sources.choose(("/opt/mxdriver/lib/libmxsml.so",), present=set())
    assert missing.library is None
    assert missing.why == "no libmxsml at /opt/mxdriver/lib/libmxsml.so: telemetry from mx-smi"
    empty = sources.choose((), present={"/opt/mxdriver/lib/libmxsml.so"})
    assert empty == sources.Choice(None, "METAX_EXPORTER_MXSML_LIBRARY is empty: telemetry from mx-smi")


def test_a_relative_path_is_refused_naming_the_setting() -> None:
    with pytest.raises(InvalidSpec) as refused:
        sources.choose(("/opt/mxdriver/lib/libmxsml.so", "lib/libmxsml.so"), present=set())
    assert [str(e) for e in refused.value.errors] == [
        "METAX_EXPORTER_MXSML_LIBRARY: must be absolute paths of libmxsml, got lib/libmxsml.so"
    ]


def test_an_unusable_library_falls_back_to_mx_smi_saying_why() -> None:
    choice = sources.fallback("/opt/mxdriver/lib/libmxsml.so", "libmxsml mxSmlInit failed: returned 4")
    assert choice.library is None
    assert choice.why == (
        "libmxsml at /opt/mxdriver/lib/libmxsml.so is unusable (libmxsml mxSmlInit failed: returned 4): "
        "telemetry from mx-smi"
    )


def test_the_running_drivers_own_library_comes_first_unless_mx_smi_is_asked_for() -> None:
    """libmxsml comes with its driver, as mx-smi does (`payload_layout.HOST_LIBRARY`, under the host root)."""
    driver = "/host/var/lib/metax/drivers/current/lib/libmxsml.so"
    assert sources.candidates("/host/", sources.DEFAULT_LIBRARIES) == (driver, *sources.DEFAULT_LIBRARIES)
    assert sources.candidates("/host", (driver, "/opt/maca/lib/libmxsml.so")) == (driver, "/opt/maca/lib/libmxsml.so")
    assert sources.candidates("/host", ()) == ()  # empty setting: mx-smi, even when the driver brought a library
    picked = sources.choose(
        sources.candidates("/host", sources.DEFAULT_LIBRARIES), {driver, "/opt/maca/lib/libmxsml.so"}
    )
    assert picked.library == driver
