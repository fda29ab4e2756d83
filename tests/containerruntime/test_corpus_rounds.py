"""The container-runtime agent's rounds over the corpus of real nodes' containerd configurations, each with the real
daemon running on its own files (C4, R-INSTALL, R-SECURITY; issue 37 item 6): tests/containerruntime/corpus_host.py
says how a case's node is set up. Debian's containerd 1.6.20 runs the cases written for containerd 1.x, the real
node's 2.4.2 those written for 2.x (no 1.7, 2.0–2.3 binary runs here: those cases load in the nearest).

For every case that configures: the agent's first round makes the daemon serve runtime handler ``metax`` with one
restart; a second round and a restarted agent write and restart nothing; the effective configuration
(``containerd config dump``) equals the original's but for our handler (and our drop-in in ``imports``, and on 1.7
``enable_cdi`` where no file set it); every file keeps its mode, the drop-in is no more permissive than what it
copies, the record is 0600; uninstall gives back every file byte for byte and mode for mode, with one more
restart and the handler gone. Cases the agent refuses (unrendered templates) leave every file as it was, with a
``RuntimeConfigInvalid`` Event naming the file, and restart nothing."""

from __future__ import annotations

import pathlib

import pytest

from metax_core.runtime import containerd, containerd_dump, detect, handler
from metax_dev import containerd_host
from metax_k8s.inmemory import cluster as inmemory
from tests.support import runtime_corpus

from .conftest import DEBIAN_CONTAINERD, harness_bin
from .corpus_host import CorpusNode

CASES = runtime_corpus.cases("containerd")


def _node(case: runtime_corpus.Case, tmp_path: pathlib.Path) -> CorpusNode:
    if case.version[0] == 1:
        return CorpusNode(case, tmp_path, DEBIAN_CONTAINERD, "/usr/bin")
    bin_dir = harness_bin()
    return CorpusNode(case, tmp_path, bin_dir / "containerd", str(bin_dir))


def _cluster() -> inmemory.InMemoryCluster:
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(containerd_host.NODE)
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="t")
    return k8s


def _reasons(k8s: inmemory.InMemoryCluster) -> list[tuple[str, str]]:
    return [
        (e.get("reason", ""), e.get("note", "") or e.get("message", ""))
        for e in k8s.objects.list("events.k8s.io/v1", "Event", "default").items
    ]


@pytest.mark.parametrize("case", [c for c in CASES if not c.refused], ids=lambda c: c.id)
def test_the_agents_rounds_on_a_real_node_of_the_corpus(case: runtime_corpus.Case, tmp_path: pathlib.Path) -> None:
    node = _node(case, tmp_path)
    before = node.files()
    try:
        node.start()
        original = node.dump()
        assert node.supervisor is not None
        k8s = _cluster()
        agent = node.agent(k8s)
        agent.tick()
        signal = node.signal()
        assert signal.ready, (case.id, signal.reason)
        assert node.supervisor.restarts == 1 and handler.RUNTIME_HANDLER in node.handlers()

        configured = node.files()
        agent.tick()
        node.agent(k8s).tick()  # a restarted agent
        assert node.files() == configured and node.supervisor.restarts == 1

        schema = detect.containerd_schema(case.version)
        done = agent.containerd.planned
        assert done is not None
        ours = (*containerd.dropin_paths(case.root), case.root)
        found = containerd_dump.differences(original, node.dump(), ours=ours, cdi_added=done.cdi_added)
        assert found == (), (case.id, found)

        for path, (_, mode) in before.items():
            assert configured[path][1] == mode, (case.id, path)  # every file kept its mode
        dropin = done.dropin.lstrip("/")
        copied = min(before[p.lstrip("/")][1] for p in done.copies if p.lstrip("/") in before)
        assert configured[dropin][1] & ~copied == 0, (case.id, oct(configured[dropin][1]), oct(copied))
        record = str(pathlib.Path(agent.ledger.path).relative_to("/"))
        assert configured[record][1] == 0o600
        assert schema.replaces_sections == (done.dropin == containerd.dropin_path(case.root, 2))

        assert agent.containerd.uninstall() == []
        after = node.files()
        assert {p: v for p, v in after.items() if p in before} == before
        assert set(after) - set(before) <= {
            "var/lib/metax/toolkit/metax-container-runtime",
            "var/lib/metax/toolkit/metax-container-runtime.conf",
        }
        assert node.supervisor.restarts == 2 and handler.RUNTIME_HANDLER not in node.handlers()
    finally:
        node.stop()


@pytest.mark.parametrize("case", [c for c in CASES if c.refused], ids=lambda c: c.id)
def test_a_node_whose_file_is_a_template_is_refused_and_left_as_it_is(
    case: runtime_corpus.Case, tmp_path: pathlib.Path
) -> None:
    """No daemon loads such a file (so none runs here): the agent's plan refuses it before anything is written."""
    node = _node(case, tmp_path)
    before = node.files()
    k8s = _cluster()
    node.supervisor = containerd_host.Supervisor(node.binary, pathlib.Path(case.root), tmp_path / "log", {})
    agent = node.agent(k8s)
    outcome = agent.containerd.run(detect.containerd_schema(case.version), ".".join(map(str, case.version)))
    assert not outcome.ready and f"{case.root}: is not valid TOML" in outcome.reason
    assert node.files() == before and node.supervisor.restarts == 0
    assert [r for r, note in _reasons(k8s) if case.root in note] == ["RuntimeConfigInvalid"]
