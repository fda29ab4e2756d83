"""The DRA driver's files on the host (`metax_core.ports.node.ClaimStore`).

* ``<cdi dir>/metax-tech.com-claim_<uid>.json``: one CDI spec per prepared claim (`metax_core.dra.prepare`),
  written atomically (`hostfiles.atomic_write`: a runtime never reads half a spec);
* ``<kubelet>/plugins/gpu.metax-tech.com/checkpoint.json``: the prepared claims (`prepare.render_checkpoint`),
  written atomically after the spec, so a claim in the checkpoint always has its spec;
* the MXMACA versions the maca agent installed (``/var/lib/metax/maca/<version>``, `metax_core.runtime.sdk`).
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Mapping
from typing import Any

from metax_core.dra import prepare
from metax_core.errors import HardwareError
from metax_core.runtime import sdk
from metax_hw import hostfiles

log = logging.getLogger(__name__)


class HostClaimStore:
    def __init__(self, cdi_dir: pathlib.Path, checkpoint: pathlib.Path, sdk_dir: pathlib.Path) -> None:
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint
        self.sdk_dir = sdk_dir

    def _spec(self, claim_uid: str) -> hostfiles.CdiSpecFile:
        return hostfiles.CdiSpecFile(self.cdi_dir, prepare.CLAIM_KIND, prepare.spec_file_name(claim_uid))

    def write_spec(self, claim_uid: str, spec: Mapping[str, Any]) -> None:
        self._spec(claim_uid).write(spec)

    def remove_spec(self, claim_uid: str) -> None:
        self._spec(claim_uid).remove()

    def has_spec(self, claim_uid: str) -> bool:
        return self._spec(claim_uid).path.is_file()

    def load_checkpoint(self) -> prepare.Checkpoint:
        try:
            text = self.checkpoint.read_text(encoding="utf-8")
        except FileNotFoundError:
            return prepare.Checkpoint()
        except (OSError, UnicodeDecodeError) as exc:
            raise HardwareError("read the DRA checkpoint", str(self.checkpoint), str(exc)) from exc
        return prepare.parse_checkpoint(text)

    def save_checkpoint(self, checkpoint: prepare.Checkpoint) -> None:
        try:
            hostfiles.atomic_write(self.checkpoint, prepare.render_checkpoint(checkpoint), mode=0o600)
        except OSError as exc:
            raise HardwareError("write the DRA checkpoint", str(self.checkpoint), str(exc.strerror or exc)) from exc

    def installed_sdks(self) -> tuple[str, ...]:
        try:
            names = [p.name for p in self.sdk_dir.iterdir() if p.is_dir()]
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise HardwareError("list the MXMACA versions", str(self.sdk_dir), str(exc)) from exc
        return tuple(str(v) for v in sdk.installed(names))
