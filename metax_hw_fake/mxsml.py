"""The fake libmxsml: a small C library (``libmxsml_fake.c``) answering from the fake host's GPUs.

Why: the real adapter (`metax_hw.mxsml`) is a ctypes binding; only a real shared object tests its signatures,
structs and return codes. `build` compiles the C source with gcc (cached by the source's hash);
`FakeHost.install_mxsml` puts it where libmxsml usually lives (``/opt/mxdriver/lib/libmxsml.so`` under the
fake root) with its state file, written here (`export`) from the same records the fake mx-smi prints
(`smi.listed`), so both adapters see one story; every change of the fake host's state re-writes it
(`state.save`). Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from metax_hw_fake import layout, smi

State = dict[str, Any]

SOURCE = Path(__file__).with_name("libmxsml_fake.c")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "metax-operator" / "fake-mxsml"
NOT_SUPPORTED = -1
"""A value the fake reports as ``MXSML_OperationNotSupport``."""
PF_FIRST_ID = 100


def build(cache: Path = CACHE) -> Path:
    """The compiled fake library, built once per source text (``<cache>/<sha256>/libmxsml.so``)."""
    source = SOURCE.read_bytes()
    target = cache / hashlib.sha256(source).hexdigest()[:16] / "libmxsml.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / "libmxsml.so"
        compiled = subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(built), str(SOURCE)],
            capture_output=True,
            text=True,
            check=False,
        )
        if compiled.returncode != 0:
            raise RuntimeError(f"gcc could not build the fake libmxsml: {compiled.stderr.strip()}")
        os.replace(built, target)  # atomic: concurrent builders agree on the result
    return target


def _mode(root: Path, address: str) -> int:
    entry = layout.devices_dir(root) / address
    if (entry / "physfn").exists():
        return 2
    return 1 if int(layout.get(entry / "sriov_numvfs") or "0") > 0 else 0


def _scaled(record: dict[str, object], key: str, factor: int) -> int:
    value = record.get(key)
    return int(float(str(value)) * factor) if value is not None else NOT_SUPPORTED


def render(root: Path, st: State) -> str:
    """The state file's text: one ``gpu`` line per function the fake lists, silent ones included."""
    settings = st.get("mxsml", {})
    driver = layout.get(layout.module_dir(root, st["native_module"]) / "version") or "-"
    lines = [f"init {int(settings.get('init', 0))}", f"maca {st.get('maca_version') or '-'}"]
    pf_id = PF_FIRST_ID
    other_id = 0
    for gpu in smi.listed(root, st, silent=True):
        r = gpu.record
        mode = _mode(root, gpu.address)
        if settings.get("pf_ids") and mode == 1:
            device_id, pf_id = pf_id, pf_id + 1
        else:
            device_id, other_id = other_id, other_id + 1
        available = 0 if str(r.get("state", "")).lower() in ("unavailable", "error", "lost") else 1
        fields = [
            device_id,
            1 if gpu.silent else 0,
            mode,
            gpu.address,
            str(r.get("uuid") or f"GPU-{gpu.address}"),
            _scaled(r, "util", 1),
            _scaled(r, "temp", 100),
            _scaled(r, "power", 1000),
            _scaled(r, "power_cap", 1000),
            _scaled(r, "mem_total_mib", 1024),
            _scaled(r, "mem_used_mib", 1024),
            _scaled(r, "xtt_total_mib", 1024),
            _scaled(r, "xtt_used_mib", 1024),
            available,
            driver,
            str(r.get("vbios") or "-"),
            f"MetaX {r['model']}",
        ]
        lines.append("gpu " + " ".join(str(f) for f in fields))
    return "\n".join(lines) + "\n"


def export(root: Path, st: State) -> None:
    """Write the state file (atomically: the library may be reading it)."""
    target = layout.mxsml_state(root)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(render(root, st))
    os.replace(tmp, target)
