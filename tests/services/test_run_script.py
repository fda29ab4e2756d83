"""`./run`'s virtualenv (issue 39 item 7): ``METAX_VENV`` may be absolute or relative to the repository.

Aspects: with an absolute ``METAX_VENV`` (``METAX_VENV=/tmp/v ./run demo``) and with a relative one, run from
another directory, ``./run demo`` runs the ``python`` of that virtualenv, not another one on PATH (before the fix,
an absolute path became ``$PWD//tmp/v/bin`` on PATH and the demo failed with ``No module named 'rich'``).

The virtualenv is a stand-in: its ``bin/python`` is a script that says which interpreter ran and with what, and
its install stamp is newer than pyproject.toml, so `./run` neither creates nor installs anything.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _stand_in_venv(root: pathlib.Path) -> pathlib.Path:
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "stand-in python $0: $*"\n')
    python.chmod(0o755)
    stamp = root / ".metax-installed"
    stamp.touch()
    newer = (REPO / "pyproject.toml").stat().st_mtime + 3600
    os.utime(stamp, (newer, newer))
    return python


@pytest.mark.parametrize("form", ["absolute", "relative to the repository"])
def test_run_demo_uses_the_python_of_metax_venv(tmp_path: pathlib.Path, form: str) -> None:
    python = _stand_in_venv(tmp_path / "v")
    venv = str(tmp_path / "v") if form == "absolute" else os.path.relpath(tmp_path / "v", REPO)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(REPO / "run"), "demo", "--help"],
        cwd=elsewhere,
        env={**os.environ, "METAX_VENV": venv},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ran, _, args = done.stdout.strip().removeprefix("stand-in python ").partition(": ")
    assert pathlib.Path(ran).resolve() == python.resolve() and args == "-m metax_dev.demo --help", done.stdout
