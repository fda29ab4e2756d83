"""Host files of gpu-device (`metax_hw.hostfiles`):

- readiness signals round-trip through ``<root>/run/metax/ready/<component>.json``; withdraw removes one;
- a malformed or mislabelled signal file is skipped (it counts as missing) with a warning;
- a component name that is not a DNS label is refused before it becomes a file name;
- the CDI spec file is written atomically (no temporary file left), not rewritten when unchanged, and
  removed for an empty spec.
"""

from __future__ import annotations

import datetime
import logging
import pathlib

import pytest

from metax_core.errors import InvalidSpec
from metax_core.node import readiness
from metax_hw import hostfiles

SPEC = {"cdiVersion": "0.3.0", "kind": "metax-tech.com/gpu", "devices": [{"name": "a", "containerEdits": {}}]}


def test_readiness_round_trip_and_withdraw(tmp_path: pathlib.Path) -> None:
    board = hostfiles.FileReadinessBoard(tmp_path)
    when = datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.UTC)
    signal = readiness.ComponentReadiness("driver", True, "metax 2.18.0 loaded", 3, "2.18.0", when)

    board.publish(signal)
    board.publish(readiness.ComponentReadiness("maca", False, "installing"))

    assert (tmp_path / "run/metax/ready/driver.json").exists()
    assert board.read_all() == {"driver": signal, "maca": readiness.ComponentReadiness("maca", False, "installing")}
    board.withdraw("driver")
    assert set(board.read_all()) == {"maca"}
    assert sorted(p.name for p in (tmp_path / "run/metax/ready").iterdir()) == ["maca.json"]


def test_malformed_signals_are_skipped_with_a_warning(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    board = hostfiles.FileReadinessBoard(tmp_path)
    board.publish(readiness.ComponentReadiness("maca", True))
    ready_dir = tmp_path / "run/metax/ready"
    (ready_dir / "driver.json").write_text("{not json")
    (ready_dir / "gpu-label.json").write_text('{"component": "gpu-label", "ready": "yes"}')
    (ready_dir / "container-runtime.json").write_text('{"component": "maca", "ready": true}')

    assert set(board.read_all()) == {"maca"}
    assert "driver.json" in caplog.text
    assert "gpu-label.json.ready: must be bool" in caplog.text
    assert "speaks for component 'maca'" in caplog.text


def test_component_names_must_be_dns_labels(tmp_path: pathlib.Path) -> None:
    board = hostfiles.FileReadinessBoard(tmp_path)
    with pytest.raises(InvalidSpec, match="'../etc' must be a lowercase DNS label"):
        board.publish(readiness.ComponentReadiness("../etc", True))


def test_cdi_spec_file_is_atomic_idempotent_and_removable(tmp_path: pathlib.Path) -> None:
    spec_file = hostfiles.CdiSpecFile(tmp_path / "cdi")

    assert spec_file.write(SPEC) is True
    assert spec_file.write(SPEC) is False
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == ["metax-tech.com-gpu.json"]
    assert spec_file.write(None) is True
    assert list((tmp_path / "cdi").iterdir()) == []
    assert spec_file.remove() is False


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "x.json"
    hostfiles.atomic_write(target, "old")
    with pytest.raises(UnicodeEncodeError):
        hostfiles.atomic_write(target, "\udcff")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
