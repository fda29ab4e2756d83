"""Coverage-guided fuzzing of the CLI's input path with atheris (libFuzzer), as a long documented run.

Not collected by pytest (the hypothesis suite beside it is the CI run). Every input goes the way a file given
to ``metax-operator validate``/``render`` goes: bytes → the safe loader → the validator → render. Anything
but the project's own errors escaping, or a hang (``-timeout``), is a finding that libFuzzer saves as a
``crash-*``/``timeout-*`` file. Run::

    .venv/bin/pip install -e '.[fuzz]'
    .venv/bin/python tests/fuzz/atheris_inputs.py -max_total_time=600 -timeout=10 -rss_limit_mb=2048
"""

from __future__ import annotations

import contextlib
import json
import sys

import atheris

with atheris.instrument_imports():
    from metax_core.cluster import workloads
    from metax_core.errors import MetaxError
    from metax_core.node import driver_config
    from metax_core.spec import text, validation


def one_input(data: bytes) -> None:
    try:
        document = text.load_document(data, "fuzz")
        rendered = workloads.render(validation.parse(document))
        json.dumps(list(rendered.objects))
    except MetaxError:
        pass
    with contextlib.suppress(MetaxError):
        driver_config.parse({driver_config.NODE_VFNUMS: data.decode("utf-8", "replace")})


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
