"""gpu-device's settings from the DaemonSet environment (`services.gpu_device.config`):

- defaults: chart healthyInterval 5, 16 sGPU shares, kubelet and CDI host paths, the R-DEP component list;
- every variable is read; a bad one is refused with the variable's name, all problems at once.
"""

from __future__ import annotations

import pathlib

import pytest

from metax_core.errors import InvalidSpec
from services.gpu_device import config


def test_defaults() -> None:
    settings = config.from_env({"NODE_NAME": "n1"})
    assert settings == config.Settings(node_name="n1")
    assert settings.healthy_interval == 5.0
    assert settings.sgpu_shares == 16
    assert settings.host_path(settings.plugin_dir) == pathlib.Path("/var/lib/kubelet/device-plugins")
    assert set(settings.required_components) == {"gpu-label", "container-runtime", "maca", "driver"}
    assert settings.required_components == config.default_required()


def test_every_variable_is_read() -> None:
    settings = config.from_env(
        {
            "NODE_NAME": "n1",
            "METAX_HOST_ROOT": "/host",
            "METAX_DEVICE_PLUGIN_DIR": "/var/lib/k/dp",
            "METAX_CDI_DIR": "/etc/cdi",
            "METAX_HEALTHY_INTERVAL": "0",
            "METAX_SGPU_SHARES_PER_GPU": "8",
            "METAX_REQUIRED_COMPONENTS": "gpu-label, container-runtime",
            "METAX_LABEL_INTERVAL": "2.5",
            "METAX_READINESS_INTERVAL": "1",
            "METAX_INVENTORY_INTERVAL": "30",
            "METAX_READINESS_MAX_AGE": "120",
            "METAX_PROBE_INTERVAL": "20",
            "METAX_CDI": "false",
        }
    )
    assert settings.host_path(settings.plugin_dir) == pathlib.Path("/host/var/lib/k/dp")
    assert settings.host_path(settings.cdi_dir) == pathlib.Path("/host/etc/cdi")
    assert (settings.healthy_interval, settings.sgpu_shares, settings.cdi_enabled) == (0.0, 8, False)
    assert settings.required_components == ("gpu-label", "container-runtime")
    assert (settings.label_interval, settings.readiness_interval, settings.inventory_interval) == (2.5, 1.0, 30.0)
    assert (settings.readiness_max_age, settings.probe_interval) == (120.0, 20.0)


def test_bad_values_are_refused_naming_each_variable() -> None:
    with pytest.raises(InvalidSpec) as caught:
        config.from_env(
            {
                "METAX_HEALTHY_INTERVAL": "-1",
                "METAX_SGPU_SHARES_PER_GPU": "0",
                "METAX_CDI": "maybe",
                "METAX_CDI_DIR": "relative/cdi",
                "METAX_REQUIRED_COMPONENTS": "driver,Maca",
            }
        )
    assert [e.path for e in caught.value.errors] == [
        "NODE_NAME",
        "METAX_CDI_DIR",
        "METAX_HEALTHY_INTERVAL",
        "METAX_SGPU_SHARES_PER_GPU",
        "METAX_CDI",
        "METAX_REQUIRED_COMPONENTS",
    ]
    assert "must be a number of seconds >= 0, got '-1'" in str(caught.value)
    assert "'Maca' must be a lowercase DNS label" in str(caught.value)


def test_readiness_max_age_zero_means_never() -> None:
    assert config.from_env({"NODE_NAME": "n", "METAX_READINESS_MAX_AGE": "0"}).readiness_max_age is None
