"""``metax-container-edit``: serve the runtime wrapper's edit requests until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import os
import sys

from metax_core.errors import MetaxError
from services._agent import loop
from services.container_edit import config, server


def main(argv: list[str] | None = None) -> int:
    loop.parse_args(
        "container-edit",
        argv,
        description="Edits MetaX containers' OCI specs at their start (SDK by METAX_MACA_VERSION, devices, sGPU).",
        doc="docs/maca.md",
    )
    environ = dict(os.environ)
    loop.setup_logging(environ)
    try:
        settings = config.from_env(environ)
    except MetaxError as exc:
        logging.getLogger("container-edit").error("cannot start container-edit: %s", exc)
        return 2
    loop.run_until_signalled(lambda stop: server.serve(settings, stop))
    return 0


if __name__ == "__main__":
    sys.exit(main())
