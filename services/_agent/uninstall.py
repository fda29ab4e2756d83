"""The uninstall side every node agent shares (R-INSTALL): notice the request on its Node, answer when undone.

Why shared: the request and the answer are node annotations (`metax_core.node.uninstall` owns both
formats); every agent reads its Node anyway and already may patch it, so no agent needs a new permission
or a new watch (the Node watch wakes it when the finalizer writes the request). An agent that sees the
request stops its normal round, undoes what it did (its own module), withdraws its readiness signal,
removes its own annotations and answers. Answering is a patch only when the answer differs, so an agent
that keeps running after it answered writes nothing; one restarted mid-undo undoes again (every undo step
looks at the host first) and answers then.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from metax_core.errors import ClusterError
from metax_core.node import publish, readiness, uninstall
from metax_hw import hostfiles
from services._agent import publish as publisher

log = logging.getLogger(__name__)


def requested(node: Mapping[str, Any] | None) -> str | None:
    """The uid of the uninstall requested on this Node, or None."""
    return uninstall.requested(publish.node_metadata(node)[1])


class Latch:
    """Once an agent has seen the request, it stays uninstalled until it exits.

    The finalizer removes the request with every other product key at its end, and before that the agents'
    RBAC (the Node may become unreadable): an agent still running then must not take either for "carry on"
    and reload a driver from a driver-config that is gone. Its pod is being deleted with its DaemonSet.
    """

    def __init__(self) -> None:
        self.uid: str | None = None

    def check(self, node: Mapping[str, Any] | None) -> str | None:
        """The uninstall this agent is in (seen now or before), or None."""
        self.uid = requested(node) or self.uid
        return self.uid


def answer(
    pub: publisher.Publisher,
    node: Mapping[str, Any] | None,
    agent: str,
    uid: str,
    *,
    kept: Iterable[str] = (),
    annotations: Iterable[str] = (),
    labels: Iterable[str] = (),
) -> bool:
    """Withdraw the readiness signal, remove ``annotations`` and ``labels`` and answer ``uid``; False when the Node
    is unwritable.

    Only while the Node (as just read) still carries the request: once the finalizer has removed it, an
    answer would be a key left behind."""
    pub.withdraw()
    if requested(node) != uid:
        return False
    done = uninstall.render_done(agent, uninstall.Done(uid, tuple(kept)))
    try:
        pub.metadata(node, labels=dict.fromkeys(labels) or None, annotations={**dict.fromkeys(annotations), **done})
    except ClusterError as exc:
        log.warning("cannot answer the uninstall on node %s: %s", pub.node_name, exc)
        return False
    return True


def remove_ready_dir(host_root: pathlib.Path) -> None:
    """The readiness directory is ours (``/run/metax/ready``): removed once the last signal is withdrawn."""
    hostfiles.remove_empty_dir(host_root / readiness.READY_DIR)  # another agent's signal still there: it removes it
