"""A component's process, from its command line to its exit status: the one ``__main__`` every component shares.

Why one: the node agents, the Deployments (topo-master, gpu-scheduler, the webhook on its own) and the socket
server (container-edit) each wrote the same ``main`` — ``--help``/``--version``, logging from
``METAX_LOG_LEVEL`` (with the chatty ``sh`` logger turned down), settings from the environment where a bad
one is exit status 2 with every problem named, SIGTERM/SIGINT a clean shutdown. A component now says only
what differs in a `Service`: its name, its help, and ``start`` — what it builds from its environment and the
run it serves until signalled.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

import attrs

from metax_core import release
from metax_core.errors import MetaxError
from metax_core.wire import agent_env

Run = Callable[[threading.Event], None]
"""What a started component serves: it returns once the stop event is set (and it has stopped)."""
Start = Callable[[Mapping[str, str], argparse.Namespace], Run]
"""Builds a component from its environment and command line; raises one of `Service.refused` to refuse."""


def run_until_signalled(run: Run) -> None:
    """Call ``run(stop)`` in this (main) thread; SIGTERM or SIGINT sets ``stop``; handlers are restored after."""
    stop = threading.Event()
    log = logging.getLogger(__name__)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        run(stop)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def setup_logging(environ: Mapping[str, str]) -> None:
    """METAX_LOG_LEVEL for our loggers; ``sh`` stays at WARNING (it logs every process start at INFO)."""
    logging.basicConfig(
        level=environ.get(agent_env.LOG_LEVEL, "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("sh").setLevel(logging.WARNING)


def parse_args(
    name: str,
    argv: Sequence[str] | None,
    *,
    description: str | None = None,
    doc: str = "docs/agents.md",
    options: Callable[[argparse.ArgumentParser], object] | None = None,
) -> argparse.Namespace:
    """``metax-<name> --help`` and ``--version``, and the component's ``options`` if it takes any (a component is
    configured by its environment)."""
    parser = argparse.ArgumentParser(
        prog=f"metax-{name}",
        description=description or f"The MetaX GPU operator's {name} node agent, as the operator's DaemonSet runs it.",
        epilog=f"Configured by the environment variables of the pod the operator renders ({doc}).",
    )
    parser.add_argument("--version", action="version", version=release.running())
    if options is not None:
        options(parser)
    return parser.parse_args(argv)


@attrs.frozen
class Service:
    """One component's process: what ``metax-<name>`` says of itself and how it starts."""

    name: str
    """``metax-<name>`` is its command, and its logger when it cannot start."""
    start: Start
    description: str | None = None
    """Its ``--help`` line (None: a node agent's)."""
    doc: str = "docs/agents.md"
    """Where its environment variables are documented (``--help``'s epilog)."""
    refused: tuple[type[Exception], ...] = (MetaxError,)
    """What ``start`` raises when the component cannot start as configured: exit status 2, said once."""
    options: Callable[[argparse.ArgumentParser], object] | None = None
    """Command-line options beyond ``--help``/``--version`` (the webhook's ``--kubeconfig``)."""

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse the command line, log, start from the environment, serve until SIGTERM or SIGINT."""
        args = parse_args(self.name, argv, description=self.description, doc=self.doc, options=self.options)
        environ = dict(os.environ)
        setup_logging(environ)
        try:
            run = self.start(environ, args)
        except self.refused as exc:
            logging.getLogger(self.name).error("cannot start %s: %s", self.name, exc)
            return 2
        run_until_signalled(run)
        return 0
