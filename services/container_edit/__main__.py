"""``metax-container-edit``: serve the runtime wrapper's edit requests until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from services._agent import service
from services.container_edit import config, server


def start(environ: Mapping[str, str], args: argparse.Namespace) -> service.Run:
    """The socket server on its settings; InvalidSpec names every bad variable."""
    settings = config.from_env(environ)
    return lambda stop: server.serve(settings, stop)


main = service.Service(
    "container-edit",
    start,
    description="Edits MetaX containers' OCI specs at their start (SDK by METAX_MACA_VERSION, devices, sGPU).",
    doc="docs/maca.md",
).main


if __name__ == "__main__":
    sys.exit(main())
