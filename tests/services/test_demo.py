"""`./run demo` runs end to end and shows the decisions it promises (README quick start)."""

from __future__ import annotations

import pytest

from metax_dev import demo


def test_demo_shows_validation_plan_rollout_and_fake_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main([]) == 0
    out, err = capsys.readouterr()
    assert "valid" in out
    assert "driver.upgradePolicy.maxParalel: unknown field; did you mean 'maxParallel'?" in err
    assert "loop 1: node-03, node-04" in out  # §3.2.8 second step: 2 then 1
    # worknode1 matches the first vfioConfig entry ("0,1,2"): three GPUs to vfio-pci, five stay native.
    assert '{"0":1,"1":1,"2":1}' in out and "metax-tech.com/gpu=5, metax-tech.com/vfio-gpu=3" in out
    # gpu-node-3 has vfnum 4 in driver-config: 2 GPUs x 4 VFs are advertised (R-VF).
    assert "metax-tech.com/gpu=8" in out
    assert "'metax-tech.com/gpu.vfnum': '4'" in out
